//! The current account, loaded once per page and shared through context so the navigation
//! and every page agree on who is signed in.

use crate::server_fns::accounts::get_me;
use cardpool_domain::{AppError, account::Viewer};
use leptos::prelude::*;

/// `Ok(None)` for a visitor.
#[derive(Clone, Copy)]
pub struct CurrentUser(pub Resource<Result<Option<Viewer>, AppError>>);

/// Blocking: the response waits for it (one quick read) so the account and its serialised value
/// are in the first chunk. Read by the header and by the page, a streamed one could resolve in
/// one boundary's HTML before its value reached the browser, which then hydrated the other
/// boundary's fallback against resolved HTML and panicked (seen once in about seven
/// full Playwright runs).
pub fn provide_current_user() {
    provide_context(CurrentUser(Resource::new_blocking(|| (), |_| get_me())));
}

pub fn use_current_user() -> CurrentUser {
    expect_context::<CurrentUser>()
}

/// Full page load of `path`: after signing in or out every part of the page must re-read the
/// session, which a client-side navigation would not do.
pub fn reload_to(path: &str) {
    #[cfg(feature = "hydrate")]
    {
        let _ = window().location().set_href(path);
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = path;
}

/// Renders `children` with the signed-in account, or a prompt to sign in.
#[component]
pub fn RequireSignIn<F, IV>(children: F) -> impl IntoView
where
    F: Fn(Viewer) -> IV + Send + Sync + 'static,
    IV: IntoView + 'static,
{
    let user = use_current_user();
    let children = std::sync::Arc::new(children);
    view! {
        <Suspense fallback=|| view! { <p class="text-slate-500">"Loading…"</p> }>
            {move || {
                let children = children.clone();
                Suspend::new(async move {
                    match user.0.await {
                        Ok(Some(me)) => children(me).into_any(),
                        Ok(None) => view! { <SignInPrompt /> }.into_any(),
                        Err(err) => view! { <p role="alert" class="text-red-700">{err.to_string()}</p> }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

#[component]
fn SignInPrompt() -> impl IntoView {
    view! {
        <div class="mx-auto max-w-md rounded-2xl bg-white p-8 text-center shadow-sm ring-1 ring-slate-200">
            <h1 class="text-xl font-semibold text-slate-900">"Sign in to continue"</h1>
            <p class="mt-2 text-slate-600">"This page belongs to a Cardpool account."</p>
            <div class="mt-6 flex justify-center gap-3">
                <a href="/sign-in" class="btn-primary">"Sign in"</a>
                <a href="/sign-up" class="btn-secondary">"Create account"</a>
            </div>
        </div>
    }
}
