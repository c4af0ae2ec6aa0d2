//! The tags that bring in the site's bundle: its stylesheet and the script that hydrates the
//! server-rendered page.
//!
//! Ours rather than Leptos' `HydrationScripts` and `HashedStylesheet` for two reasons, both
//! measured: those read `hash.txt` from disk on every page rendered, and `HydrationScripts`
//! always preloads the wasm bundle, even when hydration is deferred, so on a slow connection
//! the half-megabyte bundle downloads beside the page's own content (Lighthouse counted it
//! into the largest contentful paint: 3.3 s against a first paint of 0.8 s). Here the bundle
//! is fetched only when the page is idle (at most 2 s after load), then hydrates it.

use leptos::prelude::*;

/// In the shell's `<head>`, server-side only.
#[component]
pub fn BundleTags(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        let names = crate::ssr::bundle_names(&options);
        let pkg = format!("/{}", options.site_pkg_dir);
        let script = format!(
            "(() => {{ const hydrate = () => import(\"{pkg}/{js}\").then((m) => m.default({{ module_or_path: \
             \"{pkg}/{wasm}\" }}).then(() => m.hydrate())); if (\"requestIdleCallback\" in window) \
             requestIdleCallback(hydrate, {{ timeout: 2000 }}); else setTimeout(hydrate, 0); }})();",
            js = names.js,
            wasm = names.wasm,
        );
        let nonce = leptos::nonce::use_nonce();
        view! {
            <link id="leptos" rel="stylesheet" href=format!("{pkg}/{}", names.css) />
            <script type="module" nonce=nonce>{script}</script>
        }
    }
    #[cfg(not(feature = "ssr"))]
    let _ = options;
}
