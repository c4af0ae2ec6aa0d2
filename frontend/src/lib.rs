//! The browser entry point. Kept tiny on purpose: all UI lives in `cardpool-app`; this crate
//! only exists so the wasm bundle is built with `hydrate` and without any server code.

/// Called by the hydration script the server puts in every page.
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(cardpool_app::App);
}
