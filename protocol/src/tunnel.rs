//! Channels relayed between the server's SSH gateway and a rental's sandbox over the agent's
//! WebSocket (since 1.3): a shell, a command, SFTP, or a TCP connection inside the rental.
//!
//! Control travels as JSON messages ([`crate::ServerMessage::OpenChannel`] and friends); the
//! bytes travel as binary WebSocket frames ([`data_frame`]), so a file copy costs no base64.
//! Each direction of each channel has a window of [`CHANNEL_WINDOW`] bytes: a side sends no
//! more than that unacknowledged, and the receiver acknowledges what it has handed on
//! (`ChannelWindow`), so one slow terminal never stalls the agent's connection or the others.

use serde::{Deserialize, Serialize};

/// Bytes one side may have in flight on one channel, per direction.
pub const CHANNEL_WINDOW: u64 = 1 << 20;
/// The most bytes one data frame carries.
pub const CHANNEL_CHUNK: usize = 32 << 10;
/// Channels one agent connection carries at once.
pub const MAX_CHANNELS: usize = 64;

/// What a channel connects to inside the rental.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChannelTarget {
    /// The login shell (`ssh r42@...`).
    Shell,
    /// A command, run by the shell (`ssh r42@... nvidia-smi`, legacy `scp`).
    Exec { command: String },
    /// The SFTP server (`sftp`, and `scp` since OpenSSH 9).
    Sftp,
    /// A TCP connection from inside the rental's network (`ssh -L`).
    Tcp { host: String, port: u16 },
}

/// A terminal asked for by the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terminal {
    pub term: String,
    pub cols: u16,
    pub rows: u16,
}

/// Which stream of a channel a data frame belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// stdin towards the rental, stdout (or the TCP stream) from it.
    Main = 0,
    /// stderr, from the rental only.
    Stderr = 1,
}

/// A binary frame: the channel (8 bytes, big-endian), the stream (1 byte), then the bytes.
pub fn data_frame(channel: u64, stream: Stream, data: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(9 + data.len());
    frame.extend_from_slice(&channel.to_be_bytes());
    frame.push(stream as u8);
    frame.extend_from_slice(data);
    frame
}

/// Reads a binary frame; `None` for anything malformed.
pub fn parse_data_frame(frame: &[u8]) -> Option<(u64, Stream, &[u8])> {
    let channel = u64::from_be_bytes(frame.get(..8)?.try_into().ok()?);
    let stream = match frame.get(8)? {
        0 => Stream::Main,
        1 => Stream::Stderr,
        _ => return None,
    };
    Some((channel, stream, &frame[9..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_frames_round_trip_and_garbage_is_refused() {
        let frame = data_frame(7, Stream::Stderr, b"hello");
        assert_eq!(parse_data_frame(&frame), Some((7, Stream::Stderr, &b"hello"[..])));
        assert_eq!(
            parse_data_frame(&data_frame(u64::MAX, Stream::Main, b"")),
            Some((u64::MAX, Stream::Main, &b""[..]))
        );
        assert_eq!(parse_data_frame(&frame[..8]), None);
        let mut bad = frame.clone();
        bad[8] = 9;
        assert_eq!(parse_data_frame(&bad), None);
    }
}
