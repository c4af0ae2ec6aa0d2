//! Per-test databases on both backends, so every integration test runs on SQLite and on
//! PostgreSQL without sharing state. PostgreSQL is reached at `CARDPOOL_TEST_POSTGRES_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`); each test creates its own database
//! and drops it when the [`TestDb`] goes out of scope.

use crate::{Services, Settings, db};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection};

/// The database engines Cardpool supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

fn admin_url() -> String {
    std::env::var("CARDPOOL_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A throwaway database, removed on drop.
pub struct TestDb {
    pub url: String,
    backend: Backend,
    name: String,
}

impl TestDb {
    pub async fn new(backend: Backend) -> Self {
        let name = format!("cardpool_test_{}", uuid::Uuid::new_v4().simple());
        let url = match backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                format!("sqlite://{}", path.display())
            }
            Backend::Postgres => {
                let admin = Database::connect(admin_url()).await.expect("PostgreSQL for tests is reachable");
                admin.execute_unprepared(&format!("CREATE DATABASE \"{name}\"")).await.expect("create test database");
                admin.close().await.ok();
                let base = admin_url();
                let base = base.rsplit_once('/').map_or(base.as_str(), |(b, _)| b).to_owned();
                format!("{base}/{name}")
            }
        };
        TestDb { url, backend, name }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A migrated connection to this database.
    pub async fn connect(&self) -> DatabaseConnection {
        db::connect_and_migrate(&self.url).await.expect("migrate test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        match self.backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{}.db", self.name));
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Backend::Postgres => {
                let name = self.name.clone();
                // Drop runs inside the test's runtime; do the async cleanup on a thread of its own.
                let _ = std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
                    rt.block_on(async {
                        let admin = Database::connect(admin_url()).await.ok()?;
                        admin
                            .execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                            .await
                            .ok()?;
                        admin.close().await.ok()
                    })
                })
                .join();
            }
        }
    }
}

/// A fresh database and the services over it.
pub async fn services(backend: Backend, settings: Settings) -> (TestDb, Services) {
    let test_db = TestDb::new(backend).await;
    let conn = test_db.connect().await;
    let services = Services::new(conn, settings).await.expect("build services");
    (test_db, services)
}

/// Runs an async test function once per backend: `backend_tests!(sign_up_works, ...)` turns
/// each `async fn name(backend: Backend)` into `name::sqlite` and `name::postgres` tests.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::testing::Backend::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::testing::Backend::Postgres).await
                }
            }
        )*
    };
}
