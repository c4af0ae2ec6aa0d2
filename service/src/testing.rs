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
                        admin.close().await.ok()?;
                        forget_telemetry_stream(&name).await
                    })
                })
                .join();
            }
        }
    }
}

/// Deletes the JetStream stream replicas over the database `name` kept (cluster tests make
/// one per database; memory streams would otherwise pile up in the test NATS).
async fn forget_telemetry_stream(name: &str) -> Option<()> {
    let url = std::env::var("CARDPOOL_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let connect = async_nats::ConnectOptions::new().connection_timeout(std::time::Duration::from_secs(2)).connect(url);
    let client = tokio::time::timeout(std::time::Duration::from_secs(3), connect).await.ok()?.ok()?;
    let jetstream = async_nats::jetstream::new(client);
    let stream = crate::bus::telemetry_stream(name);
    tokio::time::timeout(std::time::Duration::from_secs(3), jetstream.delete_stream(stream)).await.ok()?.ok()?;
    Some(())
}

/// A fresh database and the services over it.
pub async fn services(backend: Backend, settings: Settings) -> (TestDb, Services) {
    let test_db = TestDb::new(backend).await;
    let conn = test_db.connect().await;
    let services = Services::new(conn, settings).await.expect("build services");
    (test_db, services)
}

/// How long one backend test may run before it fails as hung, rather than holding CI until
/// CI's own limit with nothing to show for it.
pub const TEST_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs an async test function once per backend: `backend_tests!(sign_up_works, ...)` turns
/// each `async fn name(backend: Backend)` into `name::sqlite` and `name::postgres` tests, each
/// failing after [`TEST_LIMIT`].
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let run = super::$name($crate::testing::Backend::Sqlite);
                    tokio::time::timeout($crate::testing::TEST_LIMIT, run).await.expect("the test hung");
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let run = super::$name($crate::testing::Backend::Postgres);
                    tokio::time::timeout($crate::testing::TEST_LIMIT, run).await.expect("the test hung");
                }
            }
        )*
    };
}

/// The GPU model of [`host`]'s GPUs.
pub const TEST_GPU_MODEL: &str = "NVIDIA H100 80GB HBM3";

/// A renter to sign up: `renter(&services, "r@example.com").dollars(50).await` is a signed-up
/// account with $50 of promotional credit (none unless `.dollars` says so).
pub fn renter<'a>(services: &'a Services, email: &str) -> NewPerson<'a> {
    NewPerson { services, email: email.to_owned(), provider: false, dollars: 0 }
}

/// A provider to sign up (renter and provider roles), like [`renter`].
pub fn provider<'a>(services: &'a Services, email: &str) -> NewPerson<'a> {
    NewPerson { provider: true, ..renter(services, email) }
}

/// An account [`renter`] or [`provider`] describes; awaiting it creates it.
pub struct NewPerson<'a> {
    services: &'a Services,
    email: String,
    provider: bool,
    dollars: i64,
}

impl NewPerson<'_> {
    /// Whole dollars of promotional credit in the wallet.
    pub fn dollars(self, dollars: i64) -> Self {
        NewPerson { dollars, ..self }
    }

    async fn create(self) -> crate::auth::Principal {
        use crate::ledger::{self, Book, Entry};
        let NewPerson { services, email, provider, dollars } = self;
        let request =
            cardpool_domain::account::SignUpRequest { email: email.clone(), password: "correct horse battery".into() };
        let me = crate::accounts::create_account(services, &request).await.expect("sign up");
        let mut principal = crate::auth::Principal {
            user_id: me.id,
            email: me.email,
            roles: me.roles,
            credential: crate::auth::Credential::Session,
        };
        if provider {
            principal.roles = crate::accounts::enable_provider(services, &principal).await.expect("provider").roles;
        }
        if dollars > 0 {
            let txn = services.begin_write().await.expect("transaction");
            let entry = Entry::new("credit", format!("seed:{email}"), "seed").transfer(
                Book::PromotionalCredit,
                Book::Wallet(me.id),
                dollars * 1_000_000,
            );
            ledger::post(&txn, entry).await.expect("credit");
            txn.commit().await.expect("commit");
        }
        principal
    }
}

impl<'a> std::future::IntoFuture for NewPerson<'a> {
    type Output = crate::auth::Principal;
    type IntoFuture = std::pin::Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.create())
    }
}

/// A host to enroll for `provider`: `host(&services, &provider, "h").gpus(4).islands(2).await`
/// is the id of an enrolled, online, listed host with 4 H100s in 2 NVLink islands (defaults: 1
/// GPU, 1 island), priced $2.00 on-demand, $1.60 reserved, $0.80 minimum spot bid per GPU-hour.
pub fn host<'a>(services: &'a Services, provider: &'a crate::auth::Principal, name: &str) -> NewHost<'a> {
    NewHost { services, provider, name: name.to_owned(), gpus: 1, islands: 1, mig: Vec::new() }
}

/// A host [`host`] describes; awaiting it enrolls it, reports its inventory, prices it, lists it
/// and heartbeats once.
pub struct NewHost<'a> {
    services: &'a Services,
    provider: &'a crate::auth::Principal,
    name: String,
    gpus: usize,
    islands: usize,
    mig: Vec<String>,
}

impl<'a> NewHost<'a> {
    /// MIG on every GPU, with instances of these profiles (`["3g.40gb", "1g.10gb"]`; memory
    /// from the profile's name). The GPUs are still sold whole until `hosts::set_gpu_sale`.
    pub fn mig(self, profiles: &[&str]) -> Self {
        NewHost { mig: profiles.iter().map(|p| (*p).to_owned()).collect(), ..self }
    }

    pub fn gpus(self, gpus: usize) -> Self {
        NewHost { gpus, ..self }
    }

    /// NVLink islands the GPUs are split into (GPUs link to the others of their island).
    pub fn islands(self, islands: usize) -> Self {
        NewHost { islands, ..self }
    }
}

impl<'a> std::future::IntoFuture for NewHost<'a> {
    type Output = i64;
    type IntoFuture = std::pin::Pin<Box<dyn Future<Output = i64> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let NewHost { services, provider, name, gpus, islands, mig } = self;
        Box::pin(async move { enroll_listed(services, provider, &name, gpus, islands, &mig).await })
    }
}

async fn enroll_listed(
    services: &Services,
    provider: &crate::auth::Principal,
    name: &str,
    gpus: usize,
    islands: usize,
    mig: &[String],
) -> i64 {
    use cardpool_protocol::{GpuInfo, Inventory, MigInstance, PROTOCOL_VERSION};
    let token =
        crate::hosts::create_enrollment_token(services, provider, Some("Lab"), "http://x").await.expect("token");
    let enrolled = crate::hosts::enroll_host(services, &token.token, name).await.expect("enroll");
    let row = crate::hosts::authenticate_host(services, &enrolled.credential).await.expect("host");
    let uuids: Vec<String> = (0..gpus).map(|i| format!("GPU-{name}-{i}")).collect();
    let island = |i: usize| i * islands.max(1) / gpus.max(1);
    let inventory = Inventory {
        protocol: PROTOCOL_VERSION,
        host: host_facts(name),
        gpus: (0..gpus)
            .map(|i| GpuInfo {
                index: i as u32,
                uuid: uuids[i].clone(),
                name: TEST_GPU_MODEL.into(),
                pci_bus_id: format!("00000000:{i:02X}:00.0"),
                memory_total_bytes: 80 << 30,
                driver_version: "550".into(),
                cuda_version: "12.4".into(),
                power_limit_milliwatts: None,
                mig_enabled: (!mig.is_empty()).then_some(true),
                mig_instances: mig
                    .iter()
                    .enumerate()
                    .map(|(k, profile)| MigInstance {
                        uuid: format!("MIG-{name}-{i}-{k}"),
                        profile: profile.clone(),
                        compute_slices: profile.split('g').next().and_then(|c| c.parse().ok()).unwrap_or(1),
                        memory_bytes: profile
                            .split_once('.')
                            .and_then(|(_, m)| m.trim_end_matches("gb").parse::<u64>().ok())
                            .unwrap_or(10)
                            << 30,
                        gpu_instance_id: None,
                        compute_instance_id: None,
                    })
                    .collect(),
                nvlink_peers: (0..gpus)
                    .filter(|j| *j != i && island(*j) == island(i))
                    .map(|j| uuids[j].clone())
                    .collect(),
                mig_profiles: vec![],
            })
            .collect(),
    };
    crate::hosts::record_inventory(services, &row, &inventory).await.expect("inventory");
    let price = cardpool_domain::host::GpuModelPrice {
        gpu_model: TEST_GPU_MODEL.into(),
        on_demand_micros: 2_000_000,
        reserved_micros: 1_600_000,
        spot_min_bid_micros: 800_000,
    };
    crate::hosts::update_host_pricing(services, provider, row.id, &price).await.expect("price");
    crate::hosts::set_host_listed(services, provider, row.id, true).await.expect("list");
    crate::hosts::record_heartbeat(services, &row).await.expect("heartbeat");
    row.id
}

/// What the test hosts' agents report of their machine: 64 cores, 512 GiB of RAM, 2 TiB of disk.
pub fn host_facts(hostname: &str) -> cardpool_protocol::HostFacts {
    cardpool_protocol::HostFacts {
        hostname: hostname.into(),
        cpu_model: "EPYC".into(),
        cpu_cores: 64,
        ram_bytes: 1 << 39,
        disk_bytes: 1 << 41,
        os: "Debian".into(),
        agent_version: "0.1.0".into(),
        location: None,
        nics: vec![],
    }
}
