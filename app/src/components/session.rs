//! The current account, loaded once per page and shared through context so the navigation
//! and every page agree on who is signed in; and the resources of the pages that need one.
//!
//! A signed-in page makes its resources with [`account_resource`] where the page starts, and
//! hands them to what it renders inside [`RequireSignIn`]. Made inside `RequireSignIn` (inside
//! any `Suspense`), a resource is made again each time the server walks that boundary's
//! children to find what they load (Leptos's `dry_resolve`, one to three times depending on
//! timing), each time under a new serialisation id and with a fetch of its own. The browser
//! makes it once, reads the value of the server's *first* copy, and hydrates it against the
//! markup of the *last*: when the rental or gang moved on in between (Starting, then Running)
//! hydration panicked and the page stopped polling (a browser test about one full run in
//! three under load). Made in the page's first, synchronous render, a resource is made once on
//! either side, under the same id.

use crate::server_fns::accounts::get_me;
use cardpool_domain::{AppError, account::Viewer};
use leptos::prelude::*;
use serde::{Serialize, de::DeserializeOwned};
use std::{future::Future, sync::Arc};

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

/// Whose data a page loads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Any signed-in account.
    Accounts,
    /// Accounts with provider features on.
    Providers,
    /// Providers, and admins, who see every host.
    ProvidersAndAdmins,
    /// Admins only.
    Admins,
}

impl Audience {
    fn admits(self, me: &Viewer) -> bool {
        match self {
            Audience::Accounts => true,
            Audience::Providers => me.roles.provider,
            Audience::ProvidersAndAdmins => me.roles.provider || me.roles.admin,
            Audience::Admins => me.roles.admin,
        }
    }
}

/// A signed-in page's resource, made where the page starts (see the module doc). It waits for
/// the current account and fetches only for the `audience`: a visitor gets `Unauthorized`
/// without a call to the server, so a signed-out page keeps its 200 and its sign-in prompt.
pub fn account_resource<S, T, Fut>(
    audience: Audience,
    source: impl Fn() -> S + Send + Sync + 'static,
    fetcher: impl Fn(S) -> Fut + Send + Sync + 'static,
) -> Resource<Result<T, AppError>>
where
    S: PartialEq + Clone + Send + Sync + 'static,
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
    Fut: Future<Output = Result<T, AppError>> + Send + 'static,
{
    let user = use_current_user();
    let fetcher = Arc::new(fetcher);
    Resource::new(source, move |key| {
        let fetcher = Arc::clone(&fetcher);
        async move {
            match user.0.await? {
                Some(me) if audience.admits(&me) => fetcher(key).await,
                Some(_) => Err(AppError::forbidden("not for this account")),
                None => Err(AppError::Unauthorized),
            }
        }
    })
}

/// A signed-in page's list, read again whenever one of the two actions that change it has run.
pub fn account_list<T, Fut>(changes: [RwSignal<usize>; 2], list: fn() -> Fut) -> Resource<Result<T, AppError>>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
    Fut: Future<Output = Result<T, AppError>> + Send + 'static,
{
    account_resource(Audience::Accounts, move || changes.map(|c| c.get()), move |_| list())
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

/// Renders `children` with the signed-in account, or a prompt to sign in. `children` may run
/// more than once on the server: it makes no resource (see the module doc).
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
