//! The admin console at the service level, on both backends: verifying, delisting and
//! relisting hosts, suspending and reinstating accounts, role changes and wallet credits each
//! write exactly one audit line with who, why and the state before and after; the log refuses
//! to be rewritten; and what each action means for the market holds (a delisted host gets no
//! booking, a suspended account's credentials stop working, its rentals stop, its hosts leave
//! the market and come back with it).

use crate::rentals::{market, request};
use cardpool_domain::{
    AppError,
    account::{CreateApiTokenRequest, SignInRequest},
    admin::{AuditPage, AuditQuery},
    offers::OfferQuery,
    payments::{AdjustmentKind, AdminCreditRequest},
    rentals::RentalState,
};
use cardpool_service::{
    Services, accounts, admin, api_tokens, auth::Principal, backend_tests, hosts, offers, payments, rentals,
};
use sea_orm::ConnectionTrait;

backend_tests!(
    hosts_are_verified_delisted_and_relisted_with_one_audit_line_each,
    a_suspended_account_is_shut_out_its_rentals_stop_and_its_hosts_leave_the_market,
    role_changes_and_credits_are_audited,
);

const BOSS_PASSWORD: &str = "boss password 123";

async fn boss(services: &Services) -> Principal {
    accounts::create_admin(services, "boss@example.com", Some(BOSS_PASSWORD)).await.unwrap();
    accounts::principal_for_email(services, "boss@example.com").await.unwrap()
}

async fn audit(services: &Services, admin: &Principal, kind: &str, id: i64) -> AuditPage {
    let query = AuditQuery { subject_kind: Some(kind.into()), subject_id: Some(id), ..AuditQuery::default() };
    admin::audit::list(services, admin, &query).await.unwrap()
}

fn json(text: &Option<String>) -> serde_json::Value {
    serde_json::from_str(text.as_deref().unwrap()).unwrap()
}

async fn offers_of(services: &Services, host_id: i64, verified: bool) -> usize {
    let query = OfferQuery { host_id: Some(host_id), verified: verified.then_some(true), ..OfferQuery::default() };
    offers::list_offers(services, &query).await.unwrap().offers.len()
}

async fn hosts_are_verified_delisted_and_relisted_with_one_audit_line_each(
    backend: cardpool_service::testing::Backend,
) {
    let (_db, services, provider, host_id) = market(backend, 4).await;
    let boss = boss(&services).await;
    let renter = cardpool_service::testing::renter(&services, "renter@example.com").dollars(100).await;

    // The badge: only admins give it, with a reason, once; renters can filter on it.
    assert_eq!(offers_of(&services, host_id, true).await, 0);
    let refused = admin::set_verified(&services, &provider, host_id, true, "my own host").await;
    assert!(matches!(refused, Err(AppError::Forbidden(_))), "{refused:?}");
    let no_reason = admin::set_verified(&services, &boss, host_id, true, " ").await.unwrap_err();
    assert!(no_reason.field("reason").is_some(), "{no_reason:?}");
    let verified = admin::set_verified(&services, &boss, host_id, true, "passed the burn-in").await.unwrap();
    assert!(verified.verified);
    let twice = admin::set_verified(&services, &boss, host_id, true, "again").await;
    assert!(matches!(twice, Err(AppError::Conflict(_))), "{twice:?}");
    assert_eq!(offers_of(&services, host_id, true).await, 1);
    let offer = offers::list_offers(&services, &OfferQuery::default()).await.unwrap().offers.remove(0);
    assert!(offer.verified, "the offer carries the badge");

    // Delisted for maintenance: the running rental runs on, nobody books, the provider cannot
    // put it back; relisted, it is on the market again.
    let live = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    let delisted = admin::set_delisted(&services, &boss, host_id, true, "maintenance: PSU swap").await.unwrap();
    assert_eq!(delisted.held_reason.as_deref(), Some("maintenance: PSU swap"));
    assert_eq!(offers_of(&services, host_id, false).await, 0, "off the market");
    let booking = rentals::book_offer(&services, &renter, &request(host_id, 1)).await;
    assert!(matches!(booking, Err(AppError::NotFound(_))), "{booking:?}");
    let relist = hosts::set_host_listed(&services, &provider, host_id, true).await.unwrap_err();
    assert!(relist.to_string().contains("PSU swap"), "the provider is told why: {relist}");
    let still = rentals::get_rental(&services, &renter, live.id).await.unwrap().rental;
    assert_eq!(still.state, live.state, "a live rental is not touched by a delisting");
    let relisted = admin::set_delisted(&services, &boss, host_id, false, "PSU replaced").await.unwrap();
    assert!(relisted.held_reason.is_none() && relisted.listed, "the provider's own listing applies again");
    assert_eq!(offers_of(&services, host_id, false).await, 1);

    // One line per action that happened, newest first, with who, why and what changed.
    let log = audit(&services, &boss, "host", host_id).await;
    let actions: Vec<&str> = log.entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["host.relist", "host.delist", "host.verify"]);
    assert_eq!(log.total, 3);
    let delist = &log.entries[1];
    assert_eq!((delist.actor.as_str(), delist.actor_id), ("boss@example.com", Some(boss.user_id)));
    assert_eq!(delist.reason, "maintenance: PSU swap");
    assert_eq!(json(&delist.before)["held_reason"], serde_json::Value::Null);
    assert_eq!(json(&delist.after)["held_reason"], "maintenance: PSU swap");
    assert_eq!(
        (json(&log.entries[2].before)["verified"].clone(), json(&log.entries[2].after)["verified"].clone()),
        (false.into(), true.into())
    );
    let only_delists = AuditQuery { action: Some("host.delist".into()), ..AuditQuery::default() };
    assert_eq!(admin::audit::list(&services, &boss, &only_delists).await.unwrap().total, 1);
    let bad = AuditQuery { action: Some("host.delete".into()), ..AuditQuery::default() };
    assert!(admin::audit::list(&services, &boss, &bad).await.unwrap_err().field("action").is_some());
    assert!(matches!(
        admin::audit::list(&services, &renter, &AuditQuery::default()).await,
        Err(AppError::Forbidden(_))
    ));

    // An admin revoking a host is audited too (a provider revoking their own is not an admin action).
    hosts::revoke_host(&services, &boss, host_id).await.unwrap();
    assert_eq!(audit(&services, &boss, "host", host_id).await.entries[0].action, "host.revoke");
    let revoked = admin::set_verified(&services, &boss, host_id, false, "gone").await;
    assert!(matches!(revoked, Err(AppError::Conflict(_))), "{revoked:?}");

    // The log cannot be rewritten, not even with SQL.
    for statement in ["UPDATE audit_log SET reason = 'nothing happened'", "DELETE FROM audit_log"] {
        let err = services.db.execute_unprepared(statement).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{statement}: {err}");
    }
    assert_eq!(audit(&services, &boss, "host", host_id).await.total, 4);
}

async fn a_suspended_account_is_shut_out_its_rentals_stop_and_its_hosts_leave_the_market(
    backend: cardpool_service::testing::Backend,
) {
    let (_db, services, provider, host_id) = market(backend, 4).await;
    let boss = boss(&services).await;
    let renter = cardpool_service::testing::renter(&services, "renter@example.com").dollars(100).await;
    let token = api_tokens::create_api_token(&services, &renter, &CreateApiTokenRequest { name: "laptop".into() })
        .await
        .unwrap()
        .secret;
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 2)).await.unwrap();

    assert!(matches!(admin::suspend(&services, &boss, boss.user_id, "oops").await, Err(AppError::Conflict(_))));
    let suspended = admin::suspend(&services, &boss, renter.user_id, "chargeback fraud").await.unwrap();
    assert_eq!(suspended.suspended_reason.as_deref(), Some("chargeback fraud"));
    assert!(matches!(admin::suspend(&services, &boss, renter.user_id, "again").await, Err(AppError::Conflict(_))));

    // Shut out: the token stops working, signing in is refused with the reason.
    assert!(matches!(api_tokens::authenticate(&services, &token).await, Err(AppError::Forbidden(_))));
    let sign_in = SignInRequest { email: "renter@example.com".into(), password: "correct horse battery".into() };
    let refused = accounts::check_credentials(&services, &sign_in, None).await.unwrap_err();
    assert!(refused.to_string().contains("chargeback fraud"), "{refused}");
    let wrong = SignInRequest { password: "not the password".into(), ..sign_in.clone() };
    assert!(matches!(accounts::check_credentials(&services, &wrong, None).await, Err(AppError::InvalidCredentials)));

    // Its rental was stopped: billing ended, GPUs on their way back.
    let detail = rentals::get_rental(&services, &boss, rental.id).await.unwrap();
    assert!(matches!(detail.rental.state, RentalState::Stopping | RentalState::Ended), "{:?}", detail.rental.state);
    assert!(
        detail.events.iter().any(|e| e.reason.contains("account suspended: chargeback fraud")),
        "{:?}",
        detail.events
    );

    // A suspended provider's hosts leave the market, and come back with the account.
    assert_eq!(offers_of(&services, host_id, false).await, 1);
    admin::suspend(&services, &boss, provider.user_id, "unpaid power bill").await.unwrap();
    assert_eq!(offers_of(&services, host_id, false).await, 0);
    let held = hosts::get_host(&services, &boss, host_id).await.unwrap().host;
    assert!(held.held_reason.as_deref().is_some_and(|r| r.contains("unpaid power bill")), "{held:?}");
    let reinstated = admin::reinstate(&services, &boss, provider.user_id, "bill paid").await.unwrap();
    assert!(reinstated.suspended_at.is_none());
    assert_eq!(offers_of(&services, host_id, false).await, 1);
    assert!(matches!(admin::reinstate(&services, &boss, provider.user_id, "twice").await, Err(AppError::Conflict(_))));
    admin::reinstate(&services, &boss, renter.user_id, "chargeback withdrawn").await.unwrap();
    assert_eq!(api_tokens::authenticate(&services, &token).await.unwrap().user_id, renter.user_id);
    assert!(accounts::check_credentials(&services, &sign_in, None).await.is_ok());

    let log = audit(&services, &boss, "user", provider.user_id).await;
    let actions: Vec<&str> = log.entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["user.reinstate", "user.suspend", "user.enable_provider"]);
    assert_eq!(json(&log.entries[1].after)["hosts_delisted"], serde_json::json!([host_id]));
    assert_eq!(json(&log.entries[0].after)["hosts_relisted"], serde_json::json!([host_id]));
    assert_eq!(audit(&services, &boss, "user", renter.user_id).await.total, 2);
}

async fn role_changes_and_credits_are_audited(backend: cardpool_service::testing::Backend) {
    let (_db, services) = cardpool_service::testing::services(backend, Default::default()).await;
    let boss = boss(&services).await;
    let made = audit(&services, &boss, "user", boss.user_id).await;
    assert_eq!(made.entries.len(), 1);
    assert_eq!(
        (made.entries[0].actor.as_str(), made.entries[0].actor_id),
        ("operator", None),
        "made by the command line"
    );

    let ann = cardpool_service::testing::renter(&services, "ann@example.com").await;
    accounts::enable_provider(&services, &ann).await.unwrap();
    accounts::enable_provider(&services, &ann).await.unwrap();
    admin::set_admin(&services, &boss, ann.user_id, true, "joins the ops team").await.unwrap();
    assert!(matches!(admin::set_admin(&services, &boss, ann.user_id, true, "again").await, Err(AppError::Conflict(_))));
    assert!(matches!(
        admin::set_admin(&services, &boss, boss.user_id, false, "stepping down").await,
        Err(AppError::Conflict(_))
    ));
    admin::set_admin(&services, &boss, ann.user_id, false, "left the ops team").await.unwrap();
    let credit = AdminCreditRequest {
        email: "ann@example.com".into(),
        amount: "12.50".into(),
        kind: AdjustmentKind::Credit,
        reason: "outage on Tuesday".into(),
    };
    payments::admin_adjust(&services, &boss, &credit).await.unwrap();

    let log = audit(&services, &boss, "user", ann.user_id).await;
    let actions: Vec<&str> = log.entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["wallet.credit", "user.revoke_admin", "user.grant_admin", "user.enable_provider"]);
    assert_eq!(log.entries[0].reason, "outage on Tuesday");
    assert_eq!(json(&log.entries[0].after)["balance_micros"], 12_500_000);
    assert_eq!(log.entries[3].actor, "ann@example.com", "the account turned it on itself");
    assert_eq!(json(&log.entries[1].after)["admin"], false);
}
