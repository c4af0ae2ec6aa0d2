//! How to get into a rental: the exact `ssh` command through Cardpool's gateway, a copy
//! button, the gateway's host-key fingerprint to check on first connect, and what else works
//! over it (scp, sftp, port forwarding).

use cardpool_domain::rentals::SshAccess;
use leptos::prelude::*;

#[component]
pub fn SshPanel(access: SshAccess, running: bool) -> impl IntoView {
    let copied = RwSignal::new(false);
    let command = access.command.clone();
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(window) = web_sys::window() {
            let _ = window.navigator().clipboard().write_text(&command);
            copied.set(true);
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &command;
    };
    let port = if access.port == 22 { String::new() } else { format!("-P {} ", access.port) };
    let forward = format!("{} -L 8888:localhost:8888", access.command);
    let scp = format!("scp {port}data.tar {}@{}:/workspace/", access.user, access.host);
    view! {
        <section class="card space-y-3" aria-labelledby="ssh-access" data-testid="ssh-access">
            <div class="flex flex-wrap items-center justify-between gap-2">
                <h2 id="ssh-access" class="text-lg font-semibold text-slate-900">"Connect over SSH"</h2>
                {(!running).then(|| view! { <span class="text-sm text-slate-500">"Available once the rental is running"</span> })}
            </div>
            <div class="flex flex-col gap-2 sm:flex-row sm:items-stretch">
                <code class="flex-1 select-all break-all rounded-lg bg-slate-900 px-3 py-2 font-mono text-sm text-slate-100" data-testid="ssh-command">
                    {access.command.clone()}
                </code>
                <button type="button" class="btn-secondary sm:w-28" on:click=copy aria-live="polite">
                    {move || if copied.get() { "Copied" } else { "Copy" }}
                </button>
            </div>
            <p class="text-sm text-slate-600">
                "Log in with the key you gave at booking or any key on your "
                <a class="text-indigo-700 underline" href="/account/ssh-keys">"SSH keys"</a>
                " page. The gateway's host key is "
                <code class="break-all rounded bg-slate-100 px-1 text-xs" data-testid="ssh-host-key">{access.host_key_fingerprint.clone()}</code>
                "."
            </p>
            <details class="text-sm text-slate-600">
                <summary class="cursor-pointer text-indigo-700">"Files and ports"</summary>
                <ul class="mt-2 space-y-1 font-mono text-xs">
                    <li>{scp}</li>
                    <li>{format!("sftp {port}{}@{}", access.user, access.host)}</li>
                    <li>{forward}<span class="font-sans text-slate-500">" (Jupyter, TensorBoard)"</span></li>
                </ul>
            </details>
        </section>
    }
}
