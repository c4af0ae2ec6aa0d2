//! How server functions' results travel: JSON, decoded from text.
//!
//! Leptos decodes the values a page is hydrated with by `serde_json::from_str`, while server
//! functions' own `Json` decodes answers by `serde_json::from_slice`. Each reader makes serde
//! write every type's decoder again, so a type that is both fetched and hydrated (an offer
//! page, the signed-in account, every error) was decoded by two copies of the same code in the
//! browser bundle. [`JsonText`] decodes answers through the same `from_str` as hydration; the
//! bytes on the wire are plain JSON, exactly as before.

use serde::{Serialize, de::DeserializeOwned};
use server_fn::{
    Bytes, ContentType, Decodes, Encodes, Format, FormatType,
    codec::{JsonEncoding, Post},
};

/// JSON in a `POST` answer, decoded as text. Use as `output = JsonOut` on a server function.
pub type JsonOut = Post<JsonText>;

/// The encoding behind [`JsonOut`] (and the one [`crate::AppError`] travels in).
pub struct JsonText;

impl ContentType for JsonText {
    const CONTENT_TYPE: &'static str = JsonEncoding::CONTENT_TYPE;
}

impl FormatType for JsonText {
    const FORMAT_TYPE: Format = Format::Text;
}

impl<T: Serialize> Encodes<T> for JsonText {
    type Error = serde_json::Error;

    fn encode(output: &T) -> Result<Bytes, Self::Error> {
        serde_json::to_vec(output).map(Bytes::from)
    }
}

impl<T: DeserializeOwned> Decodes<T> for JsonText {
    type Error = serde_json::Error;

    fn decode(bytes: Bytes) -> Result<T, Self::Error> {
        let text = std::str::from_utf8(&bytes).map_err(|_| serde::de::Error::custom("the answer is not UTF-8"))?;
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AppError;

    #[test]
    fn answers_round_trip_and_bad_bytes_are_an_error() {
        let err = AppError::not_found("host");
        let bytes = <JsonText as Encodes<AppError>>::encode(&err).unwrap();
        assert_eq!(<JsonText as Decodes<AppError>>::decode(bytes).unwrap(), err);
        assert!(<JsonText as Decodes<AppError>>::decode(Bytes::from_static(b"\xff\xfe")).is_err());
        assert!(<JsonText as Decodes<AppError>>::decode(Bytes::from_static(b"{\"error\":")).is_err());
    }
}
