//! Server-rendered market pages for visitors who are not signed in, kept until the market
//! changes.
//!
//! Why: `/offers` is what links, crawlers and first visits hit, and every visitor without a
//! session gets the very same page. Rendering it costs an offer search, a count, an uptime read
//! and twenty offer cards (about 1.7 ms of CPU, some forty static files' worth), so a rendering
//! is kept and served again while
//! - this process has committed no change to the offer stock since (`stock::StockVersion`
//!   moves only after a change commits, so a kept page never shows less than was committed
//!   when the visitor asked), and
//! - it is younger than [`MAX_AGE`], which bounds what the version does not count: other
//!   replicas' changes, uptime percentages, the latest spot prices.
//!
//! What is kept is bounded: 256 URLs and 16 MiB, expired pages dropped first when full.
//!
//! A request with a session cookie always gets a fresh rendering (its header names the
//! account). Each response still carries a CSP nonce of its own: a page is kept cut at every
//! occurrence of the nonce it was rendered with and served joined with a fresh one. Browsers
//! ask for gzip, and compressing the page again for every response would cost most of what
//! keeping it saves, so each piece is also kept deflated on its own (flushed to a byte
//! boundary), and a response is stitched into one valid gzip stream: the pieces, the nonce as a
//! stored block between them, an empty final block and the checksum of the whole.

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use cardpool_service::stock::StockVersion;
use flate2::{Compression, write::DeflateEncoder};
use rand::RngCore;
use std::{
    collections::HashMap,
    io::Write,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// The pages kept: the same for every visitor without a session.
const PAGES: [&str; 2] = ["/", "/offers"];
/// Longest a kept page is served, whatever the version says.
pub const MAX_AGE: Duration = Duration::from_secs(1);
/// Distinct URLs kept at most (filter combinations are the visitor's to choose).
const MAX_ENTRIES: usize = 256;
/// Longest URL kept (path and query).
const MAX_KEY_LEN: usize = 512;
/// Bytes of pages kept at most, plain and deflated together: whoever asks for many filter
/// combinations fills it, then expired pages make room, or new ones go unkept.
const MAX_KEPT_BYTES: usize = 16 * 1024 * 1024;
/// Largest page kept; a larger rendering is refused with a 500 rather than held in memory.
const MAX_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// The kept pages (shared by clones).
#[derive(Clone, Default)]
pub struct PageCache {
    shelf: Arc<Mutex<Shelf>>,
    /// One lock per URL being rendered: when a page expires under load, one request renders
    /// it and the others wait for that rendering instead of each rendering their own (without
    /// this, hundreds of renderings at once at every expiry brought the server down).
    rendering: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// The kept pages by URL, and the bytes they hold.
#[derive(Default)]
struct Shelf {
    pages: HashMap<String, Arc<Kept>>,
    bytes: usize,
}

impl Shelf {
    /// Keeps `kept` for `key` if the limits allow it, after dropping expired pages when full.
    fn put(&mut self, key: String, kept: Arc<Kept>) {
        let size = kept.size();
        if self.pages.len() >= MAX_ENTRIES || self.bytes + size > MAX_KEPT_BYTES {
            self.pages.retain(|_, k| k.at.elapsed() < MAX_AGE);
            self.bytes = self.pages.values().map(|k| k.size()).sum();
        }
        let replaced = self.pages.get(&key).map(|k| k.size());
        let room = self.pages.len() < MAX_ENTRIES || replaced.is_some();
        let bytes = self.bytes - replaced.unwrap_or(0) + size;
        if room && bytes <= MAX_KEPT_BYTES {
            self.bytes = bytes;
            self.pages.insert(key, kept);
        }
    }
}

/// One rendering, cut at its nonce.
struct Kept {
    version: u64,
    at: Instant,
    headers: HeaderMap,
    /// The `Content-Security-Policy` value, cut at the nonce.
    policy: Vec<String>,
    /// The body, cut at the nonce.
    body: Vec<Bytes>,
    /// Each piece of `body` as raw deflate blocks ending on a byte boundary.
    deflated: Vec<Bytes>,
}

impl Kept {
    fn size(&self) -> usize {
        self.body.iter().chain(&self.deflated).map(Bytes::len).sum()
    }

    fn response(&self, nonce: &str, gzip: bool) -> Response {
        let body = if gzip { self.gzip(nonce.as_bytes()) } else { join(&self.body, nonce.as_bytes()) };
        let mut response = Response::new(Body::from(body));
        *response.headers_mut() = self.headers.clone();
        let headers = response.headers_mut();
        if let Ok(policy) = HeaderValue::from_str(&self.policy.join(nonce)) {
            headers.insert(header::CONTENT_SECURITY_POLICY, policy);
        }
        headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        if gzip {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        response
    }

    /// The page with `nonce` as one gzip member (RFC 1952 around RFC 1951 blocks).
    fn gzip(&self, nonce: &[u8]) -> Vec<u8> {
        let (mut crc, mut size) = (flate2::Crc::new(), 0u32);
        let mut out = Vec::with_capacity(self.deflated.iter().map(Bytes::len).sum::<usize>() + 64);
        // Magic, deflate, no flags, no time, no extra flags, unknown OS.
        out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
        for (i, (piece, deflated)) in self.body.iter().zip(&self.deflated).enumerate() {
            if i > 0 {
                // A stored block: header bits 000 padded to the byte, LEN, NLEN, the bytes.
                let len = nonce.len() as u16;
                out.push(0);
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&(!len).to_le_bytes());
                out.extend_from_slice(nonce);
                crc.update(nonce);
                size = size.wrapping_add(len.into());
            }
            out.extend_from_slice(deflated);
            crc.update(piece);
            size = size.wrapping_add(piece.len() as u32);
        }
        // The final block: fixed Huffman codes, holding only its end.
        out.extend_from_slice(&[0x03, 0x00]);
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out
    }
}

/// The middleware: serves a kept page when it is current, otherwise renders and keeps it.
pub async fn serve(State((cache, stock)): State<(PageCache, Arc<StockVersion>)>, req: Request, next: Next) -> Response {
    let Some(key) = cacheable(&req) else { return next.run(req).await };
    let version = stock.current();
    let gzip = crate::assets::accepts_encoding(req.headers(), "gzip");
    if let Some(kept) = cache.current(&key, version) {
        return kept.response(&fresh_nonce(), gzip);
    }
    let Some(lock) = cache.render_lock(&key) else { return next.run(req).await };
    let rendering = lock.lock().await;
    // Rendered by the request this one waited for?
    if let Some(kept) = cache.current(&key, version) {
        drop(rendering);
        cache.release_render_lock(&key, lock);
        return kept.response(&fresh_nonce(), gzip);
    }
    let response = next.run(req).await;
    let response = cache.keep(key.clone(), version, response).await;
    drop(rendering);
    cache.release_render_lock(&key, lock);
    response
}

/// The cache key of a request whose page is the same for everyone, or `None`.
fn cacheable(req: &Request) -> Option<String> {
    let uri = req.uri();
    let key = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
    let anonymous = !crate::edges::has_session_cookie(req.headers());
    (req.method() == Method::GET && anonymous && PAGES.contains(&uri.path()) && key.len() <= MAX_KEY_LEN)
        .then(|| key.to_owned())
}

impl PageCache {
    /// The lock renderings of `key` take turns on, or `None` when too many URLs are being
    /// rendered at once to track another.
    fn render_lock(&self, key: &str) -> Option<Arc<tokio::sync::Mutex<()>>> {
        let mut rendering = self.rendering.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lock) = rendering.get(key) {
            return Some(lock.clone());
        }
        (rendering.len() < MAX_ENTRIES).then(|| rendering.entry(key.to_owned()).or_default().clone())
    }

    /// Drops `key`'s lock from the table once no other request holds it.
    fn release_render_lock(&self, key: &str, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut rendering = self.rendering.lock().unwrap_or_else(|e| e.into_inner());
        // Ours and the table's: nobody else is waiting.
        if Arc::strong_count(&lock) == 2 {
            rendering.remove(key);
        }
    }

    fn current(&self, key: &str, version: u64) -> Option<Arc<Kept>> {
        let shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        shelf.pages.get(key).filter(|k| k.version == version && k.at.elapsed() < MAX_AGE).cloned()
    }

    /// Reads the rendering through and keeps it when it is a page like any visitor's: a `200`
    /// that sets no cookie and names its nonce in its policy. Answers with the rendering itself.
    async fn keep(&self, key: String, version: u64, response: Response) -> Response {
        let policy = response.headers().get(header::CONTENT_SECURITY_POLICY).and_then(|v| v.to_str().ok());
        let nonce = policy.and_then(nonce_of).map(str::to_owned);
        let (Some(nonce), StatusCode::OK, false) =
            (nonce, response.status(), response.headers().contains_key(header::SET_COOKIE))
        else {
            return response;
        };
        let (parts, body) = response.into_parts();
        let bytes = match axum::body::to_bytes(body, MAX_PAGE_BYTES).await {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::error!(%error, page = %key, "page too large or cut short while rendering");
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        };
        let policy = parts.headers.get(header::CONTENT_SECURITY_POLICY).and_then(|v| v.to_str().ok()).unwrap_or("");
        let pieces = cut(&bytes, nonce.as_bytes());
        let kept = Arc::new(Kept {
            version,
            at: Instant::now(),
            policy: policy.split(nonce.as_str()).map(str::to_owned).collect(),
            body: pieces.clone(),
            deflated: pieces.iter().map(|p| deflate_piece(p)).collect(),
            headers: parts.headers.clone(),
        });
        self.shelf.lock().unwrap_or_else(|e| e.into_inner()).put(key, kept);
        Response::from_parts(parts, Body::from(bytes))
    }
}

/// `piece` as raw deflate blocks flushed to a byte boundary, with no final block, so pieces
/// compressed apart can follow one another in one stream.
fn deflate_piece(piece: &[u8]) -> Bytes {
    let mut encoder = DeflateEncoder::new(Vec::with_capacity(piece.len() / 4 + 64), Compression::default());
    // Writes to a Vec cannot fail.
    let _ = encoder.write_all(piece);
    let _ = encoder.flush();
    Bytes::from(std::mem::take(encoder.get_mut()))
}

/// The nonce in a policy's `'nonce-…'` source.
fn nonce_of(policy: &str) -> Option<&str> {
    let start = policy.find("'nonce-")? + "'nonce-".len();
    let len = policy[start..].find('\'')?;
    // Long enough to cut a page at safely, short enough for one stored block.
    Some(&policy[start..start + len]).filter(|n| (16..=256).contains(&n.len()))
}

/// 128 random bits, in the base64 a CSP nonce is written in.
fn fresh_nonce() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// `bytes` cut at every occurrence of `needle` (which is not kept).
fn cut(bytes: &Bytes, needle: &[u8]) -> Vec<Bytes> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at + needle.len() <= bytes.len() {
        if &bytes[at..at + needle.len()] == needle {
            parts.push(bytes.slice(start..at));
            at += needle.len();
            start = at;
        } else {
            at += 1;
        }
    }
    parts.push(bytes.slice(start..));
    parts
}

fn join(parts: &[Bytes], separator: &[u8]) -> Vec<u8> {
    let total = parts.iter().map(Bytes::len).sum::<usize>() + separator.len() * parts.len().saturating_sub(1);
    let mut out = Vec::with_capacity(total);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(separator);
        }
        out.extend_from_slice(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_cut_at_its_nonce_and_joined_with_another() {
        let page =
            Bytes::from_static(b"<script nonce=\"AAAAAAAAAAAAAAAAAAAAAA\">x</script><p>AAAAAAAAAAAAAAAAAAAAAA</p>");
        let parts = cut(&page, b"AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(parts.len(), 3);
        assert_eq!(join(&parts, b"BB"), b"<script nonce=\"BB\">x</script><p>BB</p>");
        assert_eq!(join(&cut(&Bytes::from_static(b"none here"), b"AAAA"), b"BB"), b"none here");
    }

    #[test]
    fn a_stitched_page_is_one_valid_gzip_stream() {
        use std::io::Read;
        let page = Bytes::from(
            "<html><script nonce=\"NONCENONCENONCENONCE00\">go()</script>".to_owned()
                + &"<li>an offer</li>".repeat(2000)
                + "<script nonce=\"NONCENONCENONCENONCE00\"></script></html>",
        );
        let body = cut(&page, b"NONCENONCENONCENONCE00");
        let kept = Kept {
            version: 0,
            at: Instant::now(),
            headers: HeaderMap::new(),
            policy: vec![],
            deflated: body.iter().map(|p| deflate_piece(p)).collect(),
            body,
        };
        let fresh = fresh_nonce();
        let gzipped = kept.gzip(fresh.as_bytes());
        assert!(gzipped.len() < page.len() / 10, "compressed: {} of {}", gzipped.len(), page.len());
        let mut unzipped = String::new();
        flate2::read::GzDecoder::new(&gzipped[..])
            .read_to_string(&mut unzipped)
            .expect("valid gzip, checksum included");
        let expected = String::from_utf8(page.to_vec()).unwrap().replace("NONCENONCENONCENONCE00", &fresh);
        assert_eq!(unzipped, expected);
        let response = kept.response(&fresh, true);
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "gzip");
    }

    #[tokio::test]
    async fn an_expired_page_is_rendered_once_however_many_ask() {
        use axum::{Router, middleware::from_fn_with_state, routing::get};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tower::ServiceExt;
        let renderings = Arc::new(AtomicUsize::new(0));
        let counter = renderings.clone();
        let app = Router::new()
            .route(
                "/offers",
                get(move || {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let nonce = fresh_nonce();
                        (
                            [(header::CONTENT_SECURITY_POLICY, format!("script-src 'nonce-{nonce}'"))],
                            format!("<script nonce=\"{nonce}\"></script>offers"),
                        )
                    }
                }),
            )
            .layer(from_fn_with_state((PageCache::default(), Arc::new(StockVersion::default())), serve));
        let asks = (0..50).map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let res = app.oneshot(Request::get("/offers").body(Body::empty()).unwrap()).await.unwrap();
                let policy = res.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
                let body = axum::body::to_bytes(res.into_body(), 1 << 16).await.unwrap();
                (policy, String::from_utf8(body.to_vec()).unwrap())
            })
        });
        let mut nonces = std::collections::HashSet::new();
        for ask in asks.collect::<Vec<_>>() {
            let (policy, body) = ask.await.unwrap();
            let nonce = nonce_of(&policy).unwrap().to_owned();
            assert_eq!(body, format!("<script nonce=\"{nonce}\"></script>offers"));
            nonces.insert(nonce);
        }
        assert_eq!(renderings.load(Ordering::SeqCst), 1, "one rendering served all fifty");
        assert_eq!(nonces.len(), 50, "each with a nonce of its own");
    }

    #[tokio::test]
    async fn kept_pages_stay_within_their_byte_budget() {
        use axum::{Router, middleware::from_fn_with_state, routing::get};
        use tower::ServiceExt;
        // Pages of 1 MiB of random text (deflating saves little): about 2 MiB each, kept.
        let app_for = |cache: PageCache| {
            Router::new()
                .route(
                    "/offers",
                    get(|| async {
                        let nonce = fresh_nonce();
                        let mut noise = vec![0u8; 768 * 1024];
                        rand::rng().fill_bytes(&mut noise);
                        (
                            [(header::CONTENT_SECURITY_POLICY, format!("script-src 'nonce-{nonce}'"))],
                            format!("<script nonce=\"{nonce}\"></script>{}", URL_SAFE_NO_PAD.encode(noise)),
                        )
                    }),
                )
                .layer(from_fn_with_state((cache, Arc::new(StockVersion::default())), serve))
        };
        let cache = PageCache::default();
        let app = app_for(cache.clone());
        for page in 0..12 {
            let uri = format!("/offers?page={page}");
            let res = app.clone().oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "a page not kept is still served");
        }
        let shelf = cache.shelf.lock().unwrap();
        assert!(shelf.bytes <= MAX_KEPT_BYTES, "{} bytes kept", shelf.bytes);
        assert_eq!(shelf.bytes, shelf.pages.values().map(|k| k.size()).sum::<usize>());
        // Fewer than all twelve: the budget turned some away (pages are only dropped when it is
        // full). How many stay depends on how many were rendered within `MAX_AGE` of each
        // other, which a loaded machine stretches, so only "some, not all" is certain.
        assert!((1..12).contains(&shelf.pages.len()), "{} pages kept", shelf.pages.len());
    }

    /// The budget itself, without the timing of real renderings: pages of exactly 2 MiB fill
    /// the 16 MiB shelf at eight, a ninth fresh one is turned away, and once the eight have
    /// expired they make room for new ones.
    #[test]
    fn the_shelf_keeps_pages_within_its_byte_budget_and_drops_expired_ones_first() {
        let page = |at: Instant| {
            Arc::new(Kept {
                version: 0,
                at,
                headers: HeaderMap::new(),
                policy: Vec::new(),
                body: vec![Bytes::from(vec![b'x'; MAX_PAGE_BYTES])],
                deflated: Vec::new(),
            })
        };
        let mut shelf = Shelf::default();
        let now = Instant::now();
        for n in 0..12 {
            shelf.put(format!("/offers?page={n}"), page(now));
        }
        assert_eq!(shelf.pages.len(), MAX_KEPT_BYTES / MAX_PAGE_BYTES, "as many as the budget holds");
        assert_eq!(shelf.bytes, MAX_KEPT_BYTES);

        let mut shelf = Shelf::default();
        let expired = now.checked_sub(MAX_AGE * 2).expect("the clock is past two seconds");
        for n in 0..8 {
            shelf.put(format!("/offers?page={n}"), page(expired));
        }
        shelf.put("/offers?page=new".into(), page(now));
        assert_eq!(shelf.pages.keys().collect::<Vec<_>>(), ["/offers?page=new"], "the expired pages made room");
        assert_eq!(shelf.bytes, MAX_PAGE_BYTES);
    }

    #[test]
    fn finds_the_policys_nonce() {
        let policy = "default-src 'self'; script-src 'self' 'nonce-AbCdEfGhIjKlMnOpQrStUv' 'wasm-unsafe-eval'";
        assert_eq!(nonce_of(policy), Some("AbCdEfGhIjKlMnOpQrStUv"));
        assert_eq!(nonce_of("script-src 'self'"), None);
        assert_eq!(nonce_of("script-src 'nonce-short'"), None, "too short to cut a page at safely");
        let fresh = fresh_nonce();
        assert_eq!(fresh.len(), 22);
        assert_ne!(fresh, fresh_nonce());
    }
}
