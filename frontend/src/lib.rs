//! The browser entry point. Kept tiny on purpose: all UI lives in `cardpool-app`; this crate
//! only exists so the wasm bundle is built with `hydrate` and without any server code.

use leptos::prelude::document;

/// Called by the hydration script the server puts in every page.
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(cardpool_app::App);
    // Lets browser tests (and curious people) tell a live page from static HTML.
    if let Some(body) = document().body() {
        let _ = body.set_attribute("data-hydrated", "true");
    }
}
