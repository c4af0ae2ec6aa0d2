//! The page for any path we do not serve (answered with status 404).

use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn NotFoundPage() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <Title text="Page not found" />
        <div class="mx-auto max-w-lg py-16 text-center">
            <p class="text-sm font-semibold text-indigo-600">"404"</p>
            <h1 class="mt-2 text-3xl font-bold text-slate-900">"Page not found"</h1>
            <p class="mt-3 text-slate-600">"There is nothing at this address. It may have moved, or the link may be wrong."</p>
            <a href="/" class="btn-primary mt-8 inline-flex">"Back to the start page"</a>
        </div>
    }
}
