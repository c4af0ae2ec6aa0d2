//! The site's static files (the wasm bundle, its JavaScript, the stylesheet, icons), served
//! from memory.
//!
//! Why not `tower_http::services::ServeDir` (what `leptos_axum::file_and_error_handler` uses):
//! it opens, stats and reads every file through tokio's blocking pool on every request, which
//! on a small machine made a 43 KB stylesheet 40× slower than `/healthz`. The built site is a
//! few megabytes, so it is read once at start-up, with the brotli and gzip siblings that
//! `cargo leptos build --release --precompress` writes beside each file, and answered from
//! memory: the best encoding the browser accepts, a strong `ETag` (304 on a match), and
//! `Cache-Control: immutable` for the content-hashed files cargo-leptos writes under the package
//! folder when `hash-files` is on (their name changes whenever their bytes do), `no-cache`
//! (revalidate) for the rest.
//!
//! Under `cargo leptos watch` (`LEPTOS_WATCH` set) files change while the server runs, so they
//! are read from disk on each request instead.

use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

/// A site larger than this is not a site (a misconfigured `site_root` pointing at `/`):
/// files past it are left to the disk fallback.
const MAX_TOTAL_BYTES: u64 = 256 * 1024 * 1024;
/// Browsers cache content-hashed files for a year and never revalidate them.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Everything else may change with the next deployment: cached, but revalidated by `ETag`.
const REVALIDATE: &str = "public, no-cache";

/// One file and its precompressed variants.
struct Asset {
    identity: Bytes,
    brotli: Option<Bytes>,
    gzip: Option<Bytes>,
    content_type: &'static str,
    etag: HeaderValue,
    cache_control: &'static str,
}

/// The site's files by URL path (`/pkg/cardpool.abc123.wasm`).
#[derive(Clone, Default)]
pub struct Assets {
    files: Arc<HashMap<String, Asset>>,
    /// Where to read from per request instead (`cargo leptos watch`).
    live_root: Option<PathBuf>,
}

impl Assets {
    /// Reads every file under `root` into memory. `hashed_dir` is the folder under `root` whose
    /// files are named by their content (cargo-leptos' package folder when `hash-files` is on:
    /// the bundle, the stylesheet, the chunks `--split` writes and their loader), except
    /// wasm-bindgen's `snippets/`, which keep their names. A missing root gives an empty table:
    /// pages still render, without styles or hydration, and the log says why.
    pub fn load(root: &Path, hashed_dir: Option<&str>) -> Assets {
        let hashed = hashed_dir.map(|dir| format!("/{}/", dir.trim_matches('/')));
        if std::env::var_os("LEPTOS_WATCH").is_some() {
            return Assets { files: Arc::default(), live_root: Some(root.to_owned()) };
        }
        let mut files = HashMap::new();
        let mut total = 0u64;
        let mut pending = vec![root.to_owned()];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                tracing::warn!(dir = %dir.display(), "site directory unreadable; static files will be missing");
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(kind) = entry.file_type() else { continue };
                if kind.is_dir() {
                    pending.push(path);
                    continue;
                }
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                if !kind.is_file() || name.ends_with(".br") || name.ends_with(".gz") {
                    continue;
                }
                let Some(url) = url_path(root, &path) else { continue };
                let Ok(identity) = std::fs::read(&path) else { continue };
                let sibling = |ext: &str| std::fs::read(format!("{}.{ext}", path.display())).ok().map(Bytes::from);
                let (brotli, gzip) = (sibling("br"), sibling("gz"));
                total += identity.len() as u64
                    + brotli.as_ref().map_or(0, |b| b.len() as u64)
                    + gzip.as_ref().map_or(0, |b| b.len() as u64);
                if total > MAX_TOTAL_BYTES {
                    tracing::warn!(root = %root.display(), "site larger than {MAX_TOTAL_BYTES} bytes; the rest is not served");
                    return Assets { files: Arc::new(files), live_root: None };
                }
                let etag = HeaderValue::from_str(&format!("\"{}\"", &hex::encode(Sha256::digest(&identity))[..32]))
                    .expect("hex is a valid header value");
                let content_named = hashed
                    .as_deref()
                    .is_some_and(|dir| url.starts_with(dir) && !url[dir.len()..].starts_with("snippets/"));
                let cache_control = if content_named { IMMUTABLE } else { REVALIDATE };
                let asset = Asset {
                    identity: Bytes::from(identity),
                    brotli,
                    gzip,
                    content_type: content_type(name),
                    etag,
                    cache_control,
                };
                files.insert(url, asset);
            }
        }
        tracing::info!(files = files.len(), bytes = total, root = %root.display(), "static files loaded");
        Assets { files: Arc::new(files), live_root: None }
    }

    /// The response for `path`, or `None` when there is no such file (the caller renders its
    /// 404 page).
    pub async fn respond(&self, method: &Method, path: &str, headers: &HeaderMap) -> Option<Response> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        if let Some(root) = &self.live_root {
            return read_live(root, path).await;
        }
        let asset = self.files.get(path)?;
        let mut response = if if_none_match(headers, &asset.etag) {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            let (body, encoding) = match preferred_encoding(headers, asset) {
                Some((encoding, body)) => (body.clone(), Some(encoding)),
                None => (asset.identity.clone(), None),
            };
            let mut response =
                Response::new(if method == Method::HEAD { Body::empty() } else { Body::from(body.clone()) });
            let h = response.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
            if let Some(encoding) = encoding {
                h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding));
            }
            response
        };
        let h = response.headers_mut();
        h.insert(header::ETAG, asset.etag.clone());
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static(asset.cache_control));
        if asset.brotli.is_some() || asset.gzip.is_some() {
            h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        }
        Some(response)
    }
}

/// `/pkg/x.wasm` for `<root>/pkg/x.wasm`; `None` for names that are not plain UTF-8.
fn url_path(root: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(root).ok()?;
    let mut url = String::new();
    for part in relative.components() {
        url.push('/');
        url.push_str(part.as_os_str().to_str()?);
    }
    Some(url)
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("webp") => "image/webp",
        Some("woff2") => "font/woff2",
        Some("json") => "application/json",
        Some("html") => "text/html; charset=utf-8",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// True when the browser's cached copy (`If-None-Match`) is this one.
fn if_none_match(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let Some(value) = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) else { return false };
    let ours = etag.to_str().unwrap_or_default();
    value.split(',').map(|t| t.trim().trim_start_matches("W/")).any(|t| t == "*" || t == ours)
}

/// Brotli, then gzip, among the encodings the request accepts (`q=0` refuses one) and the
/// file has.
fn preferred_encoding<'a>(headers: &HeaderMap, asset: &'a Asset) -> Option<(&'static str, &'a Bytes)> {
    let accepted = |wanted: &str| accepts_encoding(headers, wanted);
    if let Some(body) = asset.brotli.as_ref().filter(|_| accepted("br")) {
        return Some(("br", body));
    }
    asset.gzip.as_ref().filter(|_| accepted("gzip")).map(|body| ("gzip", body))
}

/// Whether the request's `Accept-Encoding` accepts `wanted` (by name or `*`; `q=0` refuses).
pub fn accepts_encoding(headers: &HeaderMap, wanted: &str) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim();
            let refused = parts.any(|p| {
                p.trim().strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()).is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case(wanted) || coding == "*") && !refused
        })
    })
}

/// Development: the file as it is on disk now, uncompressed and never cached.
async fn read_live(root: &Path, path: &str) -> Option<Response> {
    let relative = path.trim_start_matches('/');
    if relative.split('/').any(|part| part.is_empty() || part == "." || part == ".." || part.contains('\\')) {
        return None;
    }
    let body = tokio::fs::read(root.join(relative)).await.ok()?;
    let mut response = Response::new(Body::from(body));
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(relative)));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> (tempfile::TempDir, Assets) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pkg")).unwrap();
        std::fs::write(dir.path().join("pkg/app.abc.wasm"), b"wasm bytes").unwrap();
        std::fs::write(dir.path().join("pkg/app.abc.wasm.br"), b"br").unwrap();
        std::fs::write(dir.path().join("pkg/app.abc.wasm.gz"), b"gz").unwrap();
        std::fs::create_dir_all(dir.path().join("pkg/snippets/app-1")).unwrap();
        std::fs::write(dir.path().join("pkg/snippets/app-1/inline0.js"), b"export {}").unwrap();
        std::fs::write(dir.path().join("favicon.svg"), b"<svg/>").unwrap();
        let assets = Assets::load(dir.path(), Some("pkg"));
        (dir, assets)
    }

    fn get(accept: Option<&str>, etag: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(a) = accept {
            headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(a).unwrap());
        }
        if let Some(e) = etag {
            headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(e).unwrap());
        }
        headers
    }

    async fn body(response: Response) -> Vec<u8> {
        axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap().to_vec()
    }

    #[tokio::test]
    async fn negotiates_encoding_and_caching() {
        let (_dir, assets) = site();
        let m = Method::GET;
        let br = assets.respond(&m, "/pkg/app.abc.wasm", &get(Some("gzip, deflate, br, zstd"), None)).await.unwrap();
        assert_eq!(br.headers()[header::CONTENT_ENCODING], "br");
        assert_eq!(br.headers()[header::CACHE_CONTROL], IMMUTABLE);
        assert_eq!(br.headers()[header::CONTENT_TYPE], "application/wasm");
        assert_eq!(br.headers()[header::VARY], "accept-encoding");
        let etag = br.headers()[header::ETAG].to_str().unwrap().to_owned();
        assert_eq!(body(br).await, b"br");

        let gz = assets.respond(&m, "/pkg/app.abc.wasm", &get(Some("gzip, br;q=0"), None)).await.unwrap();
        assert_eq!(gz.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(body(gz).await, b"gz");

        let plain = assets.respond(&m, "/pkg/app.abc.wasm", &get(None, None)).await.unwrap();
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        assert_eq!(plain.headers()[header::ETAG].to_str().unwrap(), etag, "one ETag for every encoding");
        assert_eq!(body(plain).await, b"wasm bytes");

        let cached = assets.respond(&m, "/pkg/app.abc.wasm", &get(Some("br"), Some(&etag))).await.unwrap();
        assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);
        assert!(body(cached).await.is_empty());

        let icon = assets.respond(&m, "/favicon.svg", &get(Some("br"), None)).await.unwrap();
        assert_eq!(icon.headers()[header::CACHE_CONTROL], REVALIDATE, "not content-hashed: revalidated");
        assert!(icon.headers().get(header::CONTENT_ENCODING).is_none(), "no precompressed copy");

        let snippet = assets.respond(&m, "/pkg/snippets/app-1/inline0.js", &get(None, None)).await.unwrap();
        assert_eq!(snippet.headers()[header::CACHE_CONTROL], REVALIDATE, "wasm-bindgen snippets keep their names");

        let head = assets.respond(&Method::HEAD, "/favicon.svg", &get(None, None)).await.unwrap();
        assert_eq!(head.headers()[header::CONTENT_LENGTH], "6");
        assert!(body(head).await.is_empty());

        assert!(assets.respond(&m, "/missing.js", &get(None, None)).await.is_none());
        assert!(assets.respond(&m, "/pkg/../favicon.svg", &get(None, None)).await.is_none());
        assert!(assets.respond(&Method::POST, "/favicon.svg", &get(None, None)).await.is_none());
    }

    #[test]
    fn reads_accept_encoding() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
            accepts_encoding(&headers, "gzip")
        };
        assert!(with("gzip, deflate, br, zstd") && with("*") && with("GZIP;q=0.5"));
        assert!(!with("br") && !with("gzip;q=0") && !with("identity") && !accepts_encoding(&HeaderMap::new(), "gzip"));
    }
}
