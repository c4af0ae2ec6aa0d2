//! `wallet` and `top-up`: the balance, and paying in through Stripe Checkout (the wallet is
//! credited when Stripe confirms the payment, not when the URL is printed).

use crate::{Ctx, failure::Outcome, table};
use cardpool_domain::payments::{CreateTopUpRequest, TopUpCreated, Wallet};
use reqwest::Method;

pub async fn wallet(ctx: &mut Ctx<'_, '_>) -> Outcome {
    let wallet: Wallet = ctx.get("/wallet").await?;
    if ctx.json {
        return ctx.print_json(&wallet);
    }
    let out = &mut *ctx.console.out;
    writeln!(out, "Balance:  {} {}", table::dollars(wallet.balance_micros), wallet.currency.to_uppercase())?;
    writeln!(out, "Held:     {} (prepaid reservations)", table::dollars(wallet.held_micros))?;
    for top_up in &wallet.pending_top_ups {
        writeln!(
            out,
            "Pending:  top-up {} of {} ({:?}, {})",
            top_up.id,
            table::dollars(top_up.amount_micros),
            top_up.status,
            table::time(top_up.created_at)
        )?;
    }
    Ok(())
}

pub async fn top_up(ctx: &mut Ctx<'_, '_>, amount: &str) -> Outcome {
    let created: TopUpCreated =
        ctx.call(Method::POST, "/wallet/top-ups", &CreateTopUpRequest { amount: amount.to_owned() }).await?;
    if ctx.json {
        return ctx.print_json(&created);
    }
    writeln!(
        ctx.console.out,
        "Top-up {} of {} started. Pay at:\n{}\nThe wallet is credited once the payment is confirmed.",
        created.top_up.id,
        table::dollars(created.top_up.amount_micros),
        created.checkout_url
    )?;
    Ok(())
}
