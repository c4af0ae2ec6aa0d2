//! The one HTTP client every command goes through: the API's base URL, the bearer token,
//! bounded answers, error answers turned into [`Failure`]s, and `--explain`, which prints
//! each request as the `curl` command that makes it (the token as `$CARDPOOL_TOKEN`, never
//! its value; passwords as `***`).

use crate::failure::{Failure, Kind, Outcome};
use reqwest::{Method, Response, header};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::{io::Write, time::Duration};

/// The most of one answer the CLI reads (the API's pages and logs are far smaller).
const MAX_ANSWER_BYTES: usize = 16 << 20;
/// How long one request may take, streams (`logs -f`) excepted.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Api {
    http: reqwest::Client,
    /// The server, without a trailing slash: `http://127.0.0.1:3000`.
    base: String,
    /// Sent on requests that change state: the server accepts a session cookie only with
    /// its own origin (`login` signs in with one).
    origin: String,
    token: Option<String>,
    explain: bool,
}

impl Api {
    pub fn new(base: &str, token: Option<String>, explain: bool) -> Outcome<Api> {
        let base = base.trim().trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .ok_or_else(|| Failure::invalid(format!("{base:?} is not a server URL (e.g. https://cardpool.example)")))?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("cardpool-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            // The server closes a kept-alive connection idle for 10 s; one reused at that very
            // moment fails the request, so none is kept idle that long (`--wait` polls pause).
            .pool_idle_timeout(Duration::from_secs(5))
            .cookie_store(true)
            .build()
            .map_err(|e| Failure::other(format!("starting the HTTP client: {e}")))?;
        Ok(Api { http, origin: parsed.origin().ascii_serialization(), base, token, explain })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn explains(&self) -> bool {
        self.explain
    }

    /// Sends one request to `/api/v1{path}`; an error answer becomes its [`Failure`].
    pub async fn send(
        &self,
        err: &mut dyn Write,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Outcome<Response> {
        self.send_with(err, method, path, body, &[], Some(REQUEST_TIMEOUT)).await
    }

    /// [`Api::send`] with extra headers and a timeout of its own (`None`: a stream).
    pub async fn send_with(
        &self,
        err: &mut dyn Write,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, String)],
        timeout: Option<Duration>,
    ) -> Outcome<Response> {
        let url = format!("{}/api/v1{path}", self.base);
        if self.explain {
            self.explain_request(err, &method, &url, body, headers);
        }
        let changes_state = !matches!(method, Method::GET | Method::HEAD);
        let mut request = self.http.request(method, &url).header(header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if changes_state {
            request = request.header(header::ORIGIN, &self.origin);
        }
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        if self.explain {
            let _ = writeln!(err, "# -> {}", response.status());
        }
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let text = read_text(response).await.unwrap_or_default();
        Err(Failure::from_answer(status, &text))
    }

    /// Sends a request and decodes its JSON answer into the API's own type.
    pub async fn call<T: DeserializeOwned>(
        &self,
        err: &mut dyn Write,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Outcome<T> {
        let response = self.send(err, method, path, body).await?;
        let text = read_text(response).await?;
        serde_json::from_str(&text).map_err(|e| Failure::other(format!("the server's answer was not understood: {e}")))
    }

    pub async fn get<T: DeserializeOwned>(&self, err: &mut dyn Write, path: &str) -> Outcome<T> {
        self.call(err, Method::GET, path, None).await
    }

    pub fn unreachable(&self, err: reqwest::Error) -> Failure {
        let what = if err.is_timeout() { "did not answer in time" } else { "cannot be reached" };
        Failure::new(Kind::Unavailable, format!("{} {what}: {err}", self.base))
    }

    fn explain_request(
        &self,
        err: &mut dyn Write,
        method: &Method,
        url: &str,
        body: Option<&Value>,
        headers: &[(&str, String)],
    ) {
        let mut line = format!("curl -X {method} {}", quote(url));
        if self.token.is_some() {
            line.push_str(" -H \"Authorization: Bearer $CARDPOOL_TOKEN\"");
        }
        for (name, value) in headers {
            line.push_str(&format!(" -H {}", quote(&format!("{name}: {value}"))));
        }
        if let Some(body) = body {
            let mut shown = body.clone();
            if let Some(password) = shown.get_mut("password") {
                *password = Value::from("***");
            }
            line.push_str(&format!(" -H 'Content-Type: application/json' -d {}", quote(&shown.to_string())));
        }
        let _ = writeln!(err, "{line}");
    }
}

/// An answer's body as text, refusing one larger than [`MAX_ANSWER_BYTES`].
pub async fn read_text(mut response: Response) -> Outcome<String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| Failure::other(format!("reading the answer: {e}")))? {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(Failure::other("the server's answer is larger than 16 MiB"));
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).map_err(|_| Failure::other("the server's answer is not UTF-8"))
}

/// `raw` as one shell word.
fn quote(raw: &str) -> String {
    format!("'{}'", raw.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explains_requests_as_curl_without_secrets() {
        let api = Api::new("http://127.0.0.1:3000/", Some("cpt_secret".into()), true).unwrap();
        let mut err = Vec::new();
        let body = serde_json::json!({"email": "a@example.com", "password": "hunter2", "note": "it's"});
        api.explain_request(&mut err, &Method::POST, "http://127.0.0.1:3000/api/v1/x", Some(&body), &[]);
        let line = String::from_utf8(err).unwrap();
        assert!(
            line.starts_with(
                "curl -X POST 'http://127.0.0.1:3000/api/v1/x' -H \"Authorization: Bearer $CARDPOOL_TOKEN\""
            )
        );
        assert!(!line.contains("cpt_secret") && !line.contains("hunter2"), "{line}");
        assert!(line.contains(r#""password":"***""#) && line.contains(r"it'\''s"), "{line}");
    }

    #[test]
    fn only_http_urls_are_servers() {
        assert_eq!(Api::new("https://cardpool.example/", None, false).unwrap().origin, "https://cardpool.example");
        for bad in ["cardpool.example", "ftp://x", ""] {
            assert_eq!(Api::new(bad, None, false).err().map(|f| f.kind), Some(Kind::Invalid), "{bad:?}");
        }
    }
}
