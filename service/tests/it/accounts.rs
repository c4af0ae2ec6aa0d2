//! Service-level behaviour of accounts, tokens and sessions, on SQLite and PostgreSQL.

use cardpool_domain::{
    AppError,
    account::{ChangePasswordRequest, CreateApiTokenRequest, SignInRequest, SignUpRequest},
};
use cardpool_service::{
    Services, Settings, accounts, admin, api_tokens,
    auth::{Credential, Principal},
    backend_tests,
    entities::{api_tokens as token_rows, users},
    rate_limit::{Limit, SignInLimits},
    session_store::DbSessionStore,
    testing::{self, Backend},
};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use std::time::Duration;
use tower_sessions::{
    ExpiredDeletion, SessionStore,
    session::{Id, Record},
};

const PASSWORD: &str = "correct horse battery";

fn sign_up_request(email: &str) -> SignUpRequest {
    SignUpRequest { email: email.into(), password: PASSWORD.into() }
}

fn sign_in_request(email: &str, password: &str) -> SignInRequest {
    SignInRequest { email: email.into(), password: password.into() }
}

async fn setup(backend: Backend) -> (testing::TestDb, Services) {
    testing::services(backend, Settings::default()).await
}

async fn principal(services: &Services, email: &str) -> Principal {
    let me = accounts::create_account(services, &sign_up_request(email)).await.unwrap();
    Principal { user_id: me.id, email: me.email, roles: me.roles, credential: Credential::Session }
}

backend_tests!(
    sign_up_creates_a_renter_with_an_argon2id_hash,
    sign_up_rejects_bad_input_and_changes_nothing,
    sign_up_rejects_a_duplicate_email,
    sign_in_gives_one_generic_error,
    sign_in_is_rate_limited_per_account,
    change_password_requires_the_current_one_and_bumps_the_epoch,
    roles_are_checked_in_the_service,
    api_tokens_are_hashed_listed_and_revoked,
    tokens_are_scoped_to_their_owner,
    session_store_round_trips_and_expires,
);

async fn sign_up_creates_a_renter_with_an_argon2id_hash(backend: Backend) {
    let (_db, services) = setup(backend).await;
    let me = accounts::create_account(&services, &sign_up_request("  Ada@Example.com")).await.unwrap();
    assert_eq!(me.email, "ada@example.com");
    assert!(me.roles.renter && !me.roles.provider && !me.roles.admin);
    let row = users::Entity::find_by_id(me.id).one(&services.db).await.unwrap().unwrap();
    assert!(row.password_hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"));
    assert!(!row.password_hash.contains(PASSWORD));
}

async fn sign_up_rejects_bad_input_and_changes_nothing(backend: Backend) {
    let (_db, services) = setup(backend).await;
    let err =
        accounts::create_account(&services, &SignUpRequest { email: "not-an-email".into(), password: "short".into() })
            .await
            .unwrap_err();
    assert!(err.field("email").is_some() && err.field("password").is_some(), "{err:?}");
    assert_eq!(users::Entity::find().count(&services.db).await.unwrap(), 0);
}

async fn sign_up_rejects_a_duplicate_email(backend: Backend) {
    let (_db, services) = setup(backend).await;
    accounts::create_account(&services, &sign_up_request("bo@example.com")).await.unwrap();
    let err = accounts::create_account(&services, &sign_up_request("BO@example.com")).await.unwrap_err();
    assert_eq!(err.field("email"), Some("an account with this email already exists"));
    assert_eq!(users::Entity::find().count(&services.db).await.unwrap(), 1);
}

async fn sign_in_gives_one_generic_error(backend: Backend) {
    let (_db, services) = setup(backend).await;
    accounts::create_account(&services, &sign_up_request("cy@example.com")).await.unwrap();
    let (me, epoch) =
        accounts::check_credentials(&services, &sign_in_request("CY@example.com", PASSWORD), None).await.unwrap();
    assert_eq!((me.email.as_str(), epoch), ("cy@example.com", 0));
    let wrong =
        accounts::check_credentials(&services, &sign_in_request("cy@example.com", "wrong password!"), None).await;
    let unknown = accounts::check_credentials(&services, &sign_in_request("nobody@example.com", PASSWORD), None).await;
    assert_eq!(wrong.unwrap_err(), AppError::InvalidCredentials);
    assert_eq!(unknown.unwrap_err(), AppError::InvalidCredentials);
}

async fn sign_in_is_rate_limited_per_account(backend: Backend) {
    let settings = Settings {
        sign_in_limits: SignInLimits {
            per_account: Limit { max: 3, window: Duration::from_secs(600) },
            per_ip: Limit { max: 100, window: Duration::from_secs(600) },
            ..SignInLimits::default()
        },
        ..Settings::default()
    };
    let (_db, services) = testing::services(backend, settings).await;
    accounts::create_account(&services, &sign_up_request("di@example.com")).await.unwrap();
    for _ in 0..3 {
        let err =
            accounts::check_credentials(&services, &sign_in_request("di@example.com", "nope nope nope"), None).await;
        assert_eq!(err.unwrap_err(), AppError::InvalidCredentials);
    }
    let limited = accounts::check_credentials(&services, &sign_in_request("di@example.com", PASSWORD), None).await;
    assert!(
        matches!(limited, Err(AppError::RateLimited { retry_after_secs }) if retry_after_secs > 500),
        "{limited:?}"
    );
}

async fn change_password_requires_the_current_one_and_bumps_the_epoch(backend: Backend) {
    let (_db, services) = setup(backend).await;
    let me = principal(&services, "ed@example.com").await;
    let wrong =
        ChangePasswordRequest { current_password: "not it at all".into(), new_password: "a brand new secret".into() };
    let err = accounts::set_password(&services, &me, &wrong).await.unwrap_err();
    assert!(err.field("current_password").is_some());
    let weak = ChangePasswordRequest { current_password: PASSWORD.into(), new_password: "short".into() };
    assert!(accounts::set_password(&services, &me, &weak).await.unwrap_err().field("new_password").is_some());

    let good = ChangePasswordRequest { current_password: PASSWORD.into(), new_password: "a brand new secret".into() };
    assert_eq!(accounts::set_password(&services, &me, &good).await.unwrap(), 1);
    assert!(accounts::check_credentials(&services, &sign_in_request("ed@example.com", PASSWORD), None).await.is_err());
    let (_, epoch) =
        accounts::check_credentials(&services, &sign_in_request("ed@example.com", "a brand new secret"), None)
            .await
            .unwrap();
    assert_eq!(epoch, 1);

    let via_token = Principal { credential: Credential::ApiToken { token_id: 1 }, ..me };
    assert!(matches!(accounts::set_password(&services, &via_token, &good).await, Err(AppError::Forbidden(_))));
}

async fn roles_are_checked_in_the_service(backend: Backend) {
    let (_db, services) = setup(backend).await;
    let renter = principal(&services, "fi@example.com").await;
    let other = principal(&services, "gu@example.com").await;
    assert!(matches!(accounts::list_users(&services, &renter, None).await, Err(AppError::Forbidden(_))));
    assert!(matches!(
        admin::set_admin(&services, &renter, other.user_id, true, "needs it").await,
        Err(AppError::Forbidden(_))
    ));

    let me = accounts::enable_provider(&services, &renter).await.unwrap();
    assert!(me.roles.provider && !me.roles.admin);

    assert_eq!(
        accounts::create_admin(&services, "fi@example.com", None).await.unwrap(),
        accounts::AdminCreated::Promoted
    );
    let admin = Principal { roles: accounts::get_me(&services, &renter).await.unwrap().roles, ..renter };
    assert!(admin.roles.admin);
    assert_eq!(accounts::list_users(&services, &admin, None).await.unwrap().len(), 2);
    let promoted = admin::set_admin(&services, &admin, other.user_id, true, "runs the night shift").await.unwrap();
    assert!(promoted.roles.admin);
    assert!(matches!(admin::set_admin(&services, &admin, 9999, true, "nobody").await, Err(AppError::NotFound(_))));

    assert_eq!(
        accounts::create_admin(&services, "root@example.com", Some("operator password")).await.unwrap(),
        accounts::AdminCreated::Created
    );
    assert!(accounts::create_admin(&services, "new@example.com", None).await.unwrap_err().field("password").is_some());
}

async fn api_tokens_are_hashed_listed_and_revoked(backend: Backend) {
    let (_db, services) = setup(backend).await;
    let me = principal(&services, "ha@example.com").await;
    assert!(
        api_tokens::create_api_token(&services, &me, &CreateApiTokenRequest { name: "  ".into() })
            .await
            .unwrap_err()
            .field("name")
            .is_some()
    );
    let created =
        api_tokens::create_api_token(&services, &me, &CreateApiTokenRequest { name: "ci".into() }).await.unwrap();
    assert!(created.secret.starts_with("cpt_") && created.secret.starts_with(&created.token.prefix));

    let row = token_rows::Entity::find_by_id(created.token.id).one(&services.db).await.unwrap().unwrap();
    assert_ne!(row.token_hash, created.secret);
    assert!(!row.token_hash.contains(&created.secret[4..]));

    let who = api_tokens::authenticate(&services, &created.secret).await.unwrap();
    assert_eq!((who.user_id, who.credential), (me.user_id, Credential::ApiToken { token_id: created.token.id }));
    let listed = api_tokens::list_api_tokens(&services, &me).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].last_used_at.is_some());

    api_tokens::revoke_api_token(&services, &me, created.token.id).await.unwrap();
    assert_eq!(api_tokens::authenticate(&services, &created.secret).await.unwrap_err(), AppError::Unauthorized);
    assert!(api_tokens::list_api_tokens(&services, &me).await.unwrap().is_empty());
    assert!(matches!(api_tokens::revoke_api_token(&services, &me, created.token.id).await, Err(AppError::NotFound(_))));
    assert_eq!(api_tokens::authenticate(&services, "cpt_madeup").await.unwrap_err(), AppError::Unauthorized);
}

async fn tokens_are_scoped_to_their_owner(backend: Backend) {
    let (_db, services) = setup(backend).await;
    let owner = principal(&services, "io@example.com").await;
    let thief = principal(&services, "ju@example.com").await;
    let created =
        api_tokens::create_api_token(&services, &owner, &CreateApiTokenRequest { name: "mine".into() }).await.unwrap();
    assert!(api_tokens::list_api_tokens(&services, &thief).await.unwrap().is_empty());
    assert!(matches!(
        api_tokens::revoke_api_token(&services, &thief, created.token.id).await,
        Err(AppError::NotFound(_))
    ));
    let still =
        token_rows::Entity::find().filter(token_rows::Column::RevokedAt.is_null()).count(&services.db).await.unwrap();
    assert_eq!(still, 1);
}

async fn session_store_round_trips_and_expires(backend: Backend) {
    let (_db, services) = setup(backend).await;
    let store = DbSessionStore::new(services.db.clone());
    let mut record = Record {
        id: Id::default(),
        data: [("user_id".to_owned(), serde_json::json!(7))].into(),
        expiry_date: time::OffsetDateTime::now_utc() + time::Duration::hours(1),
    };
    store.create(&mut record).await.unwrap();
    let loaded = store.load(&record.id).await.unwrap().unwrap();
    assert_eq!(loaded.data, record.data);
    assert_eq!(loaded.expiry_date.unix_timestamp(), record.expiry_date.unix_timestamp());

    record.data.insert("epoch".into(), serde_json::json!(3));
    store.save(&record).await.unwrap();
    assert_eq!(store.load(&record.id).await.unwrap().unwrap().data.len(), 2);
    // What is stored is the id's digest: the table alone signs nobody in.
    use cardpool_service::entities::sessions;
    let rows = sessions::Entity::find().all(&services.db).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_ne!(rows[0].id, record.id.to_string());
    assert_eq!(rows[0].id, cardpool_service::secrets::digest(&record.id.to_string()));

    // A request still in flight when its session signed out saves what it loaded: the session
    // stays signed out.
    let in_flight = store.load(&record.id).await.unwrap().unwrap();
    store.delete(&record.id).await.unwrap();
    store.save(&in_flight).await.unwrap();
    assert!(store.load(&record.id).await.unwrap().is_none(), "a signed-out session came back");
    store.create(&mut record).await.unwrap();

    let mut stale = Record {
        id: Id::default(),
        data: Default::default(),
        expiry_date: time::OffsetDateTime::now_utc() - time::Duration::seconds(1),
    };
    store.create(&mut stale).await.unwrap();
    assert!(store.load(&stale.id).await.unwrap().is_none(), "expired sessions never load");
    store.delete_expired().await.unwrap();
    store.delete(&record.id).await.unwrap();
    assert!(store.load(&record.id).await.unwrap().is_none());
    assert_eq!(sessions::Entity::find().count(&services.db).await.unwrap(), 0);
}
