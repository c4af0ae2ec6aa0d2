//! The server's edge toward clients, shared by every adapter that answers HTTP (the JSON API,
//! the agent gateway, the middleware): who is calling ([`Caller`], [`RequestSession`],
//! [`client_ip`]) and how an [`AppError`] is answered ([`ApiError`]: a JSON [`ErrorBody`] with
//! the status from [`AppError::status`], `Retry-After` on rate limits, `WWW-Authenticate` on
//! 401). Keeping them here lets `api`, `http` and `gateway` depend on this file instead of on
//! each other.

use axum::{
    Json,
    extract::{
        FromRequest, FromRequestParts, Path, Query,
        rejection::{JsonRejection, QueryRejection},
    },
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use cardpool_app::ssr::AppState;
use cardpool_domain::{AppError, error::ErrorBody};
use cardpool_service::{
    Services, api_tokens as tokens,
    auth::{self, ClientIp, Principal},
};
use tower_sessions::Session;

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "cardpool_session";

/// Whether the request carries a session cookie (valid or not).
pub fn has_session_cookie(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(';').any(|c| c.trim_start().starts_with(SESSION_COOKIE)))
}

/// An [`AppError`] answered as JSON.
#[derive(Debug)]
pub struct ApiError(pub AppError);

impl From<AppError> for ApiError {
    fn from(err: AppError) -> Self {
        ApiError(err)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError(AppError::Validation { message: rejection.body_text(), fields: Default::default() })
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        ApiError(AppError::Validation { message: rejection.body_text(), fields: Default::default() })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(ErrorBody::from(&self.0))).into_response();
        match self.0 {
            AppError::RateLimited { retry_after_secs } => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            AppError::Unauthorized => {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A JSON object body as `T`; its rejections are our JSON errors. Only an object is taken:
/// serde would otherwise read a struct from an array of its fields (`[]` for a struct whose
/// fields all have defaults), which no client means.
pub struct ApiJson<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(value) = Json::<serde_json::Value>::from_request(req, state).await?;
        if !value.is_object() {
            return Err(ApiError(AppError::Validation {
                message: "the request body must be a JSON object".into(),
                fields: Default::default(),
            }));
        }
        serde_json::from_value(value).map(ApiJson).map_err(|err| {
            ApiError(AppError::Validation {
                message: format!("Failed to deserialize the JSON body into the target type: {err}"),
                fields: Default::default(),
            })
        })
    }
}

/// `Query<T>` whose rejections are our JSON errors (422 with what does not parse).
#[derive(FromRequestParts)]
#[from_request(via(Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// The services and the authenticated caller: a bearer token if one is sent, else the browser
/// session.
pub struct Caller(pub Services, pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
            let secret =
                value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).ok_or(ApiError(AppError::Unauthorized))?;
            return Ok(Caller(state.services.clone(), tokens::authenticate(&state.services, secret.trim()).await?));
        }
        let session = session(parts).await?;
        Ok(Caller(state.services.clone(), auth::require_session(&state.services, &session).await?))
    }
}

async fn session(parts: &mut Parts) -> Result<Session, ApiError> {
    Session::from_request_parts(parts, &()).await.map_err(|_| ApiError(AppError::Internal))
}

/// The browser session of the request (sign-in and sign-out act on it).
pub struct RequestSession(pub Session);

impl<S: Send + Sync> FromRequestParts<S> for RequestSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(RequestSession(session(parts).await?))
    }
}

/// The client address decided by the `client_ip` middleware.
pub fn client_ip(parts: &Parts) -> ClientIp {
    parts.extensions.get::<ClientIp>().copied().unwrap_or_default()
}

/// A numeric id from the path; a malformed one is answered by [`PathId::of`] as a field error
/// naming what it should have been, instead of axum's plain-text rejection.
pub struct PathId(Option<i64>);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(PathId(Path::<i64>::from_request_parts(parts, state).await.ok().map(|Path(id)| id)))
    }
}

impl PathId {
    /// The id, or "not `what` id" (`what`: "a rental", "an alert").
    pub fn of(self, what: &str) -> Result<i64, ApiError> {
        self.0.ok_or_else(|| ApiError(AppError::invalid_field("id", format!("not {what} id"))))
    }
}
