//! One GPU's MIG layout on the host page: the profiles its agent can carve it into and the
//! provider's form that asks for a new layout, pending (the GPU off the market) until the
//! agent reports it carved, or why it could not.

use crate::{components::form::INPUT, server_fns::hosts::SetMigLayout};
use cardpool_domain::host::{GpuView, mig};
use leptos::prelude::*;

/// The layout form of a GPU whose agent can carve it.
#[component]
pub fn MigLayoutForm(host_id: i64, gpu: GpuView, action: ServerAction<SetMigLayout>) -> impl IntoView {
    let index = gpu.index;
    let now: Vec<&str> = gpu.mig_instances.iter().map(|m| m.profile.as_str()).collect();
    let current = mig::write_layout(&now);
    let pending = gpu.mig_layout_pending.as_deref().map(mig::write_layout);
    let input_id = format!("mig-layout-{index}");
    let error = move || match action.value().get() {
        Some(Err(e)) if action.input().get().is_none_or(|i| i.gpu_index == index) => Some(e.to_string()),
        _ => None,
    };
    let example = gpu.mig_profiles.first().map_or_else(|| "1g.10gb*7".to_owned(), |p| format!("{}*2", p.name));
    let placeholder = example.clone();
    view! {
        <div class="mt-3 border-t border-slate-100 pt-3" data-testid="mig-layout">
            {pending.clone().map(|layout| view! {
                <p role="status" class="flex items-center gap-2 text-xs text-amber-800" data-testid="mig-layout-pending">
                    <span class="inline-block h-3 w-3 animate-spin rounded-full border-2 border-amber-300 border-t-amber-700" aria-hidden="true"></span>
                    "Carving " <span class="font-mono">{layout}</span> "… off the market until the agent reports it"
                </p>
            })}
            {gpu.mig_layout_error.clone().map(|why| view! {
                <p role="alert" class="text-xs text-red-700" data-testid="mig-layout-error">"The last layout was not applied: " {why}</p>
            })}
            <ActionForm action attr:class="mt-2 flex flex-wrap items-end gap-2">
                <input type="hidden" name="id" value=host_id />
                <input type="hidden" name="gpu_index" value=index />
                <div class="min-w-0 flex-1">
                    <label for=input_id.clone() class="block text-xs font-medium text-slate-700">"MIG layout"</label>
                    <input
                        id=input_id
                        name="layout"
                        class=format!("{INPUT} mt-1 py-1 font-mono text-xs")
                        value=pending.unwrap_or(current)
                        placeholder=placeholder
                        autocomplete="off"
                        aria-describedby=format!("mig-profiles-{index}")
                    />
                </div>
                <button type="submit" class="btn-secondary px-2 py-1 text-xs" disabled=move || action.pending().get()>"Apply layout"</button>
            </ActionForm>
            {move || error().map(|e| view! { <p role="alert" class="mt-1 text-xs text-red-700">{e}</p> })}
            <p id=format!("mig-profiles-{index}") class="mt-2 text-xs text-slate-500">
                "Profiles, as " <span class="font-mono">{example}</span> " joined by +. Only while nothing is rented on this GPU; new slices are sold as the GPU is."
            </p>
            <ul class="mt-1 flex flex-wrap gap-1 text-xs" aria-label="Profiles this GPU can make" data-testid="mig-profiles">
                {gpu.mig_profiles.into_iter().map(|p| {
                    let title = format!(
                        "{} of 7 compute slices, {} of 8 memory slices; up to {} per GPU",
                        p.compute_slices, p.memory_slices, p.max_instances
                    );
                    view! {
                        <li class="badge bg-slate-50 text-slate-700 ring-slate-200" title=title>
                            <span class="font-mono">{p.name}</span> {format!(" · {} GiB · ≤{}", p.memory_bytes >> 30, p.max_instances)}
                        </li>
                    }
                }).collect_view()}
            </ul>
        </div>
    }
}
