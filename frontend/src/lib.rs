//! The browser entry point. Kept tiny on purpose: all UI lives in `cardpool-app`; this crate
//! only exists so the wasm bundle is built with `hydrate` and without any server code.

use leptos::prelude::document;

/// Called by the hydration script the server puts in every page.
///
/// Hydration is asynchronous: each page's code is a chunk of its own (`cargo leptos build
/// --split`, see `cardpool_app::pages::lazy_pages!`), fetched before the page it renders is
/// hydrated.
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    let Some(body) = document().body() else { return };
    wasm_bindgen_futures::spawn_local(async move {
        leptos::mount::hydrate_from_async(body.clone(), cardpool_app::App).await.forget();
        // Lets browser tests (and curious people) tell a live page from static HTML.
        let _ = body.set_attribute("data-hydrated", "true");
    });
}
