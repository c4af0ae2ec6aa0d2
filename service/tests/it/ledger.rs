//! The ledger under random sequences of operations, on SQLite and PostgreSQL: every
//! transaction balances, money is conserved, cached balances equal derived ones, nobody's
//! account goes negative, refused operations change nothing, and the balances match a plain
//! in-memory model of the same operations.

use cardpool_domain::account::SignUpRequest;
use cardpool_service::{
    AppError, Services, Settings, backend_tests,
    ledger::{self, Book, Entry, split_fee},
    testing::{self, Backend},
};
use proptest::{prelude::*, test_runner::TestRunner};
use std::collections::HashMap;

const FEE_BPS: u32 = 1250;

#[derive(Debug, Clone)]
enum Op {
    TopUp { renter: usize, amount: i64 },
    Charge { renter: usize, provider: usize, amount: i64 },
    Hold { renter: usize, amount: i64 },
    Release { renter: usize, amount: i64 },
    Capture { renter: usize, provider: usize, amount: i64 },
    Payout { provider: usize, amount: i64 },
    Credit { renter: usize, amount: i64 },
    Replay { op: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let amount = 1i64..50_000_000;
    prop_oneof![
        (0..2usize, amount.clone()).prop_map(|(renter, amount)| Op::TopUp { renter, amount }),
        (0..2usize, 0..2usize, amount.clone()).prop_map(|(renter, provider, amount)| Op::Charge {
            renter,
            provider,
            amount
        }),
        (0..2usize, amount.clone()).prop_map(|(renter, amount)| Op::Hold { renter, amount }),
        (0..2usize, amount.clone()).prop_map(|(renter, amount)| Op::Release { renter, amount }),
        (0..2usize, 0..2usize, amount.clone()).prop_map(|(renter, provider, amount)| Op::Capture {
            renter,
            provider,
            amount
        }),
        (0..2usize, amount.clone()).prop_map(|(provider, amount)| Op::Payout { provider, amount }),
        (0..2usize, amount).prop_map(|(renter, amount)| Op::Credit { renter, amount }),
        (0..40usize).prop_map(|op| Op::Replay { op }),
    ]
}

/// The same rules, in memory.
#[derive(Default, Debug, PartialEq, Eq)]
struct Model(HashMap<Book, i64>);

impl Model {
    fn get(&self, book: Book) -> i64 {
        self.0.get(&book).copied().unwrap_or(0)
    }

    /// Applies legs if no person's account would go negative; returns whether it did.
    fn apply(&mut self, legs: &[(Book, i64)]) -> bool {
        let mut next = HashMap::new();
        for (book, amount) in legs {
            *next.entry(*book).or_insert_with(|| self.get(*book)) += amount;
        }
        if next.iter().any(|(book, balance)| book.user_id().is_some() && *balance < 0) {
            return false;
        }
        self.0.extend(next);
        true
    }
}

fn legs(op: &Op, renters: &[i64], providers: &[i64]) -> Vec<(Book, i64)> {
    let fee = |amount| split_fee(amount, FEE_BPS);
    match *op {
        Op::TopUp { renter, amount } => vec![(Book::StripeClearing, -amount), (Book::Wallet(renters[renter]), amount)],
        Op::Charge { renter, provider, amount } => {
            let (share, fee) = fee(amount);
            vec![
                (Book::Wallet(renters[renter]), -amount),
                (Book::Earnings(providers[provider]), share),
                (Book::PlatformFees, fee),
            ]
        }
        Op::Hold { renter, amount } => {
            vec![(Book::Wallet(renters[renter]), -amount), (Book::Held(renters[renter]), amount)]
        }
        Op::Release { renter, amount } => {
            vec![(Book::Held(renters[renter]), -amount), (Book::Wallet(renters[renter]), amount)]
        }
        Op::Capture { renter, provider, amount } => {
            let (share, fee) = fee(amount);
            vec![
                (Book::Held(renters[renter]), -amount),
                (Book::Earnings(providers[provider]), share),
                (Book::PlatformFees, fee),
            ]
        }
        Op::Payout { provider, amount } => {
            vec![(Book::Earnings(providers[provider]), -amount), (Book::StripeClearing, amount)]
        }
        Op::Credit { renter, amount } => {
            vec![(Book::PromotionalCredit, -amount), (Book::Wallet(renters[renter]), amount)]
        }
        Op::Replay { .. } => vec![],
    }
}

async fn random_operations_keep_the_ledger_sound(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let mut people = Vec::new();
    for i in 0..4 {
        let email = format!("person{i}@example.com");
        let me = cardpool_service::accounts::create_account(
            &services,
            &SignUpRequest { email, password: "correct horse battery".into() },
        )
        .await
        .unwrap();
        people.push(me.id);
    }
    let (renters, providers) = people.split_at(2);
    // proptest generates the cases; they run here, one after another on one database (fresh
    // references each), each checked against a model seeded from the balances before it.
    // A failing case is shrunk like any proptest; the async checks run on this runtime.
    let mut runner = TestRunner::new(ProptestConfig { cases: 12, ..ProptestConfig::default() });
    let handle = tokio::runtime::Handle::current();
    let case = std::sync::atomic::AtomicUsize::new(0);
    tokio::task::block_in_place(|| {
        runner.run(&proptest::collection::vec(op(), 1..30), |ops| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            handle.block_on(run_case(&services, &ops, renters, providers, n));
            Ok(())
        })
    })
    .unwrap();
    let check = ledger::verify(&services.db).await.unwrap();
    assert!(check.is_sound(), "{check:?}");
    assert!(check.transactions > 0);
}

/// Posts `ops` and checks each outcome, and the balances after, against the model started
/// from what the database holds now.
async fn run_case(services: &Services, ops: &[Op], renters: &[i64], providers: &[i64], case: usize) {
    let mut seeded = Vec::new();
    for &r in renters {
        seeded.push(Book::Wallet(r));
        seeded.push(Book::Held(r));
    }
    for &p in providers {
        seeded.push(Book::Earnings(p));
    }
    seeded.extend([Book::PlatformFees, Book::StripeClearing, Book::PromotionalCredit]);
    let mut start = HashMap::new();
    for book in seeded {
        start.insert(book, ledger::balance(&services.db, book).await.unwrap());
    }
    let mut model = Model(start);
    let mut posted: Vec<(String, Vec<(Book, i64)>)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (reference, legs) = match op {
            Op::Replay { op } if !posted.is_empty() => posted[op % posted.len()].clone(),
            Op::Replay { .. } => continue,
            op => (format!("case{case}:op{i}"), legs(op, renters, providers)),
        };
        let txn = services.begin_write().await.unwrap();
        let mut entry = Entry::new("test", reference.clone(), format!("{op:?}"));
        entry.legs = legs.clone();
        match ledger::post(&txn, entry).await {
            Ok(_) => {
                txn.commit().await.unwrap();
                assert!(!matches!(op, Op::Replay { .. }), "a replayed reference was booked twice");
                assert!(model.apply(&legs), "the ledger accepted what the model refuses: {op:?}");
                posted.push((reference, legs));
            }
            Err(AppError::PaymentRequired(message)) => {
                assert!(message.contains("short by $"), "{message}");
                assert!(!Model(model.0.clone()).apply(&legs), "the ledger refused what the model accepts: {op:?}");
            }
            Err(AppError::Conflict(_)) => assert!(matches!(op, Op::Replay { .. }), "unexpected conflict for {op:?}"),
            Err(other) => panic!("{op:?}: {other:?}"),
        }
    }
    for (book, expected) in &model.0 {
        assert_eq!(ledger::balance(&services.db, *book).await.unwrap(), *expected, "{book:?}");
    }
    let check = ledger::verify(&services.db).await.unwrap();
    assert!(check.is_sound(), "after case {case}: {check:?}");
}

async fn unbalanced_entries_are_refused(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let txn = services.begin_write().await.unwrap();
    let entry = Entry::new("test", "bad", "unbalanced").leg(Book::StripeClearing, -5).leg(Book::PlatformFees, 4);
    assert_eq!(ledger::post(&txn, entry).await, Err(AppError::Internal));
    let empty = Entry::new("test", "empty", "nothing");
    assert_eq!(ledger::post(&txn, empty).await, Err(AppError::Internal));
    drop(txn);
    assert_eq!(ledger::verify(&services.db).await.unwrap().transactions, 0);
}

async fn concurrent_charges_never_overdraw(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let me = cardpool_service::accounts::create_account(
        &services,
        &SignUpRequest { email: "spender@example.com".into(), password: "correct horse battery".into() },
    )
    .await
    .unwrap();
    let txn = services.begin_write().await.unwrap();
    ledger::post(
        &txn,
        Entry::new("credit", "seed", "seed").transfer(Book::PromotionalCredit, Book::Wallet(me.id), 10_000_000),
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();
    // 20 concurrent $1 charges against $10: exactly 10 succeed.
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let services = services.clone();
            tokio::spawn(async move {
                let txn = services.begin_write().await.unwrap();
                match ledger::charge_usage(&txn, me.id, me.id, 1_000_000, FEE_BPS, format!("c{i}"), "charge".into())
                    .await
                {
                    Ok(_) => txn.commit().await.map(|_| true).unwrap(),
                    Err(AppError::PaymentRequired(_)) => false,
                    Err(other) => panic!("{other:?}"),
                }
            })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        accepted += usize::from(task.await.unwrap());
    }
    assert_eq!(accepted, 10);
    assert_eq!(ledger::balance(&services.db, Book::Wallet(me.id)).await.unwrap(), 0);

    // The edge: exactly the balance is fine, one micro-dollar more is not.
    let txn = services.begin_write().await.unwrap();
    ledger::post(&txn, Entry::new("credit", "seed2", "seed").transfer(Book::PromotionalCredit, Book::Wallet(me.id), 5))
        .await
        .unwrap();
    txn.commit().await.unwrap();
    let txn = services.begin_write().await.unwrap();
    let short = ledger::charge_usage(&txn, me.id, me.id, 6, FEE_BPS, "over".into(), "charge".into()).await;
    assert_eq!(
        short,
        Err(AppError::PaymentRequired(
            "insufficient balance: $0.000006 needed, $0.000005 available (short by $0.000001)".into()
        ))
    );
    drop(txn);
    let txn = services.begin_write().await.unwrap();
    ledger::charge_usage(&txn, me.id, me.id, 5, FEE_BPS, "exact".into(), "charge".into()).await.unwrap();
    txn.commit().await.unwrap();
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn histories_page_at_any_depth_and_the_audit_finds_what_is_wrong(backend: Backend) {
    use cardpool_service::entities::{ledger_accounts, ledger_postings};
    use sea_orm::{ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter};
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let renter = Book::Wallet(testing::renter(&services, "pages@example.com").await.user_id);
    let old = chrono::Utc::now() - chrono::Duration::days(2);
    let txn = services.begin_write().await.unwrap();
    for i in 0..250i64 {
        let mut entry = Entry::new("test", format!("t{i}"), format!("entry {i}"));
        entry = if i % 5 == 4 {
            entry.transfer(renter, Book::PlatformFees, 3)
        } else {
            entry.transfer(Book::PromotionalCredit, renter, 10 + i)
        };
        if i < 100 {
            entry.at = old;
        }
        ledger::post(&txn, entry).await.unwrap();
    }
    txn.commit().await.unwrap();
    let balance = ledger::balance(&services.db, renter).await.unwrap();

    // Newest first, a page at a time: every entry once, each balance the one after it.
    let (mut pages, mut before) = (Vec::new(), None);
    loop {
        let page = ledger::recent_entries(&services.db, renter, before, 100).await.unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.transaction_id);
        pages.extend(page);
    }
    assert_eq!(pages.len(), 250);
    assert_eq!(pages[0].balance_after_micros, balance);
    for pair in pages.windows(2) {
        assert!(pair[0].transaction_id > pair[1].transaction_id);
        assert_eq!(pair[1].balance_after_micros, pair[0].balance_after_micros - pair[0].amount_micros);
    }
    assert_eq!(pages[249].balance_after_micros, pages[249].amount_micros, "the first entry starts from zero");
    // Oldest first (exports), carrying the balance across pages: the same entries.
    let (mut forward, mut after, mut carried) = (Vec::new(), None, 0);
    loop {
        let page = ledger::entries_after(&services.db, renter, after, carried, 64).await.unwrap();
        let Some(last) = page.last() else { break };
        (after, carried) = (Some(last.transaction_id), last.balance_after_micros);
        forward.extend(page);
    }
    forward.reverse();
    assert_eq!(forward, pages);
    // Recent credits: the positive entries of the last day only.
    let recent: i64 = (100..250i64).filter(|i| i % 5 != 4).map(|i| 10 + i).sum();
    let since = chrono::Utc::now() - chrono::Duration::days(1);
    assert_eq!(ledger::credits_since(&services.db, renter, since).await.unwrap(), recent);

    // The audit finds a drifted balance and an unbalanced transaction.
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
    let account = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(renter.code()))
        .one(&services.db)
        .await
        .unwrap()
        .unwrap();
    let (account_id, code) = (account.id, account.code.clone());
    let mut drifted = account.into_active_model();
    drifted.balance_micros = Set(balance + 2);
    drifted.update(&services.db).await.unwrap();
    let posting = ledger_postings::Entity::find().one(&services.db).await.unwrap().unwrap();
    ledger_postings::ActiveModel {
        transaction_id: Set(posting.transaction_id),
        ledger_account_id: Set(account_id),
        amount_micros: Set(1),
        ..Default::default()
    }
    .insert(&services.db)
    .await
    .unwrap();
    let check = ledger::verify(&services.db).await.unwrap();
    assert_eq!(check.unbalanced_transactions, vec![posting.transaction_id]);
    assert_eq!(check.drifted_accounts, vec![code], "{check:?}");
    assert_eq!(check.total_micros, 1);
    assert!(!check.is_sound());
}

backend_tests!(
    histories_page_at_any_depth_and_the_audit_finds_what_is_wrong,
    random_operations_keep_the_ledger_sound,
    unbalanced_entries_are_refused,
    concurrent_charges_never_overdraw
);
