//! `offers`: the market's search with the web's filters, as the same `OfferQuery` the
//! `/offers` page puts in its URL.

use crate::{
    Ctx,
    args::{Link, Offers, Sort, Unit},
    failure::Outcome,
    table,
};
use cardpool_domain::{
    fabric::Interconnect,
    offers::{OfferPage, OfferQuery, OfferSort, OfferUnit},
};

pub fn query(args: &Offers) -> OfferQuery {
    OfferQuery {
        gpu_model: args.gpu_model.clone(),
        min_gpus: args.min_gpus,
        min_vram_gib: args.min_vram,
        max_price: args.max_price.clone(),
        kind: args.kind.map(|k| k.domain()),
        location: args.location.clone(),
        min_cuda: args.min_cuda.clone(),
        sort: args.sort.map(|s| match s {
            Sort::Price => OfferSort::Price,
            Sort::PricePerVram => OfferSort::PricePerVram,
            Sort::Availability => OfferSort::Availability,
        }),
        page: args.page,
        per_page: args.per_page,
        host_id: args.host,
        verified: args.verified.then_some(true),
        unit: args.unit.map(|u| match u {
            Unit::Gpu => OfferUnit::Gpu,
            Unit::Slice => OfferUnit::Slice,
        }),
        mig_profile: args.mig_profile.clone(),
        fabric: args.fabric.clone(),
        interconnect: args.interconnect.map(|i| match i {
            Link::Infiniband => Interconnect::Infiniband,
            Link::Roce => Interconnect::Roce,
            Link::Ethernet => Interconnect::Ethernet,
        }),
    }
}

/// One page of offers for `query`.
pub async fn search(ctx: &mut Ctx<'_, '_>, query: &OfferQuery) -> Outcome<OfferPage> {
    ctx.get(&format!("/offers?{}", query.to_query_string())).await
}

pub async fn offers(ctx: &mut Ctx<'_, '_>, args: &Offers) -> Outcome {
    let page = search(ctx, &query(args)).await?;
    if ctx.json {
        return ctx.print_json(&page);
    }
    if page.offers.is_empty() {
        writeln!(ctx.console.out, "No offers match.")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = page
        .offers
        .iter()
        .map(|o| {
            vec![
                o.host_id.to_string(),
                if o.verified { "✓" } else { "" }.to_owned(),
                o.gpu_model.clone(),
                table::gib(o.vram_bytes),
                o.gpus_free.to_string(),
                table::dollars(o.on_demand_micros),
                table::dollars(o.reserved_micros),
                table::dollars(o.spot_price_micros),
                o.location.clone().unwrap_or_default(),
                o.cuda_version.clone(),
                format!("{}.{}%", o.uptime_permille / 10, o.uptime_permille % 10),
            ]
        })
        .collect();
    let headers =
        ["HOST", "✓", "GPU", "VRAM", "FREE", "ON-DEMAND/H", "RESERVED/H", "SPOT/H", "LOCATION", "CUDA", "UPTIME"];
    table::print(ctx.console.out, &headers, &rows)?;
    let pages = page.total.div_ceil(u64::from(page.per_page.max(1))).max(1);
    writeln!(
        ctx.console.out,
        "\npage {} of {pages} ({} offers); rent one with: cardpool-cli rent --host HOST --gpus N",
        page.page.max(1),
        page.total
    )?;
    Ok(())
}

/// `advise`: the cost advisor's mix for a job on one offer.
pub async fn advise(ctx: &mut Ctx<'_, '_>, job: &crate::args::Advise) -> Outcome {
    use cardpool_domain::advisor::{Advice, AdviceRequest};
    let gpu_model = job.offer.gpu_model(ctx).await?;
    let request = AdviceRequest {
        host_id: job.offer.host,
        gpu_model,
        gpus: job.gpus,
        hours: job.hours,
        deadline_hours: job.deadline.unwrap_or(job.hours),
        interruptible: job.interruptible,
        checkpoint_minutes: job.checkpoint_minutes,
    };
    request.checked()?;
    let mut url =
        reqwest::Url::parse("http://query.invalid/").map_err(|e| crate::failure::Failure::other(e.to_string()))?;
    url.query_pairs_mut()
        .append_pair("host_id", &request.host_id.to_string())
        .append_pair("gpu_model", &request.gpu_model)
        .append_pair("gpus", &request.gpus.to_string())
        .append_pair("hours", &request.hours.to_string())
        .append_pair("deadline_hours", &request.deadline_hours.to_string())
        .append_pair("interruptible", &request.interruptible.to_string())
        .append_pair("checkpoint_minutes", &request.checkpoint_minutes.to_string());
    let advice: Advice = ctx.get(&format!("/advice?{}", url.query().unwrap_or_default())).await?;
    if ctx.json {
        return ctx.print_json(&advice);
    }
    let out = &mut *ctx.console.out;
    writeln!(
        out,
        "For {}x {} for {} h, done within {} h:",
        request.gpus, request.gpu_model, request.hours, request.deadline_hours
    )?;
    for part in &advice.parts {
        writeln!(
            out,
            "  {:<10} {:>4} h  {:>12}  {}",
            part.kind.as_str().replace('_', "-"),
            part.hours,
            table::dollars(part.expected_micros),
            part.why
        )?;
    }
    writeln!(
        out,
        "Expected {} (likely {} to {}); all on-demand {}: saves {}.",
        table::dollars(advice.expected_micros),
        table::dollars(advice.low_micros),
        table::dollars(advice.high_micros),
        table::dollars(advice.all_on_demand_micros),
        table::dollars(advice.saving_micros)
    )?;
    writeln!(
        out,
        "Done in about {}.{} h. Based on:",
        advice.expected_wall_hours_tenths / 10,
        advice.expected_wall_hours_tenths % 10
    )?;
    for line in &advice.basis {
        writeln!(out, "  - {line}")?;
    }
    Ok(())
}
