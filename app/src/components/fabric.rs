//! A host's network fabric: the badge offers carry, and the provider's form on the host page
//! with the links the agent reports (see `cardpool_domain::fabric`).

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{Badge, Tone},
    },
    server_fns::hosts::SetHostFabric,
};
use cardpool_domain::fabric::{FabricView, Interconnect, NicInfo};
use leptos::prelude::*;

/// "InfiniBand 400 Gb/s · fabric pdx-ib-1", good when the agent's links confirm it.
#[component]
pub fn FabricBadge(fabric: FabricView) -> impl IntoView {
    let (tone, note) = match fabric.checked {
        Some(true) => (Tone::Good, " ✓"),
        _ => (Tone::Neutral, " (declared)"),
    };
    let title = match fabric.checked {
        Some(true) => "the host's agent reports an up link of this kind and speed",
        Some(false) => "declared by the provider; the host's agent reports no such link",
        None => "declared by the provider; the host's agent reports no links",
    };
    view! {
        <span title=title>
            <Badge tone testid="fabric">{format!("{} · fabric {}{note}", fabric.summary(), fabric.fabric_id)}</Badge>
        </span>
    }
}

/// The provider's fabric declaration for one host, and the links its agent reports.
#[component]
pub fn FabricSection(
    host_id: i64,
    fabric: Option<FabricView>,
    links: Vec<NicInfo>,
    action: ServerAction<SetHostFabric>,
) -> impl IntoView {
    let value = action.value();
    let current = fabric.clone();
    let chosen = current.as_ref().map_or(Interconnect::Infiniband, |f| f.interconnect);
    view! {
        <section class="card" aria-labelledby="fabric">
            <h2 id="fabric" class="text-lg font-semibold text-slate-900">"Network fabric"</h2>
            <p class="mt-1 text-sm text-slate-600">
                "Hosts that reach each other over one network share a fabric id; renters filter on it, and multi-node gangs book hosts of one fabric, whose members reach this host at its address there. Leave the id empty to clear it."
            </p>
            <p class="mt-3 text-sm" data-testid="fabric-state">
                {match fabric {
                    Some(f) => view! { <FabricBadge fabric=f /> }.into_any(),
                    None => view! { <span class="text-slate-500">"No fabric declared."</span> }.into_any(),
                }}
            </p>
            <ActionForm action attr:class="mt-4 grid gap-4 sm:grid-cols-5 sm:items-end" attr:novalidate=true>
                <input type="hidden" name="id" value=host_id />
                <Field label="Fabric id" name="fabric_id" value=current.as_ref().map(|f| f.fabric_id.clone()).unwrap_or_default() error=field_error(value, "fabric_id") />
                <div class="space-y-1">
                    <label for="fabric-interconnect" class="block text-sm font-medium text-slate-800">"Interconnect"</label>
                    <select id="fabric-interconnect" name="interconnect" class=crate::components::form::INPUT>
                        {[Interconnect::Infiniband, Interconnect::Roce, Interconnect::Ethernet]
                            .into_iter()
                            .map(|i| view! { <option value=i.as_str() selected=i == chosen>{i.label()}</option> })
                            .collect_view()}
                    </select>
                </div>
                <Field label="Link speed (Gb/s)" name="gbps" value=current.as_ref().map(|f| f.gbps.to_string()).unwrap_or_default() error=field_error(value, "gbps") />
                <Field label="Address on the fabric" name="address" value=current.as_ref().and_then(|f| f.address.clone()).unwrap_or_default() error=field_error(value, "address") />
                <SubmitButton label="Save fabric" pending=action.pending() />
            </ActionForm>
            <div class="mt-3"><FormAlert message=form_error(value) /></div>
            <h3 class="mt-4 text-sm font-medium text-slate-800">"Links the agent reports"</h3>
            {if links.is_empty() {
                view! { <p class="mt-1 text-sm text-slate-500">"None (an older agent, or no physical links visible)."</p> }.into_any()
            } else {
                view! {
                    <ul class="mt-1 flex flex-wrap gap-2 text-xs" data-testid="fabric-links">
                        {links.into_iter().map(|l| {
                            let speed = l.speed_mbps.map_or_else(|| "speed unknown".to_owned(), |m| format!("{} Gb/s", m / 1000));
                            let tone = if l.up { Tone::Info } else { Tone::Neutral };
                            view! { <Badge tone>{format!("{} · {} · {speed}{}", l.name, l.link, if l.up { "" } else { " · down" })}</Badge> }
                        }).collect_view()}
                    </ul>
                }.into_any()
            }}
        </section>
    }
}
