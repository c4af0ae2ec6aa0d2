//! Workload logs on the agent: each rental's stdout and stderr go to `workload.log` in its
//! directory (a file, not a pipe, so a workload never blocks on or dies with the agent). The
//! file is kept to its last [`LOG_RING_BYTES`]: older bytes are punched out (the file keeps its
//! length, so offsets never move, but stops holding the data), and readers ask by offset.

use cardpool_protocol::{LOG_CHUNK_BYTES, LOG_RING_BYTES, LogChunk};
use std::{
    io::{Read, Seek, SeekFrom},
    path::Path,
};

/// The log file in a rental's directory.
pub const LOG_FILE: &str = "workload.log";
/// Punching is done in whole blocks of this size.
const BLOCK: u64 = 4096;

/// Reads the log from `offset` (`None`: the last `max_bytes`), at most `max_bytes` (capped at
/// [`LOG_CHUNK_BYTES`]), ending at a line's end when a line ends in it.
pub fn read(rental_dir: &Path, offset: Option<u64>, max_bytes: u32, running: bool) -> Result<LogChunk, String> {
    let path = rental_dir.join(LOG_FILE);
    let mut file = std::fs::File::open(&path).map_err(|_| "this host has no log for that rental".to_owned())?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let kept_from = size.saturating_sub(LOG_RING_BYTES);
    let max = u64::from(max_bytes.clamp(1, LOG_CHUNK_BYTES));
    let wanted = offset.unwrap_or_else(|| size.saturating_sub(max));
    let start = wanted.clamp(kept_from, size);
    let skipped = start.saturating_sub(wanted);
    let len = (size - start).min(max);
    let mut bytes = vec![0; len as usize];
    file.seek(SeekFrom::Start(start)).map_err(|e| e.to_string())?;
    file.read_exact(&mut bytes).map_err(|e| e.to_string())?;
    // A full chunk stops after its last whole line; the rest comes with the next read.
    if len == max
        && let Some(last) = bytes.iter().rposition(|b| *b == b'\n')
    {
        bytes.truncate(last + 1);
    }
    // A tail starts at a line's start.
    let mut start = start;
    if offset.is_none() && start > 0 {
        let mut before = [0u8; 1];
        file.seek(SeekFrom::Start(start - 1)).map_err(|e| e.to_string())?;
        file.read_exact(&mut before).map_err(|e| e.to_string())?;
        if before[0] != b'\n'
            && let Some(first) = bytes.iter().position(|b| *b == b'\n')
        {
            bytes.drain(..=first);
            start += first as u64 + 1;
        }
    }
    let end = start + bytes.len() as u64;
    Ok(LogChunk { offset: start, end, skipped, data: String::from_utf8_lossy(&bytes).into_owned(), running })
}

/// Frees what lies before the last [`LOG_RING_BYTES`] of the log, when that is at least a
/// megabyte, keeping the file's length (and so every offset). Returns the bytes freed.
pub fn trim(rental_dir: &Path) -> u64 {
    use nix::fcntl::{FallocateFlags, fallocate};
    let Ok(file) = std::fs::OpenOptions::new().write(true).open(rental_dir.join(LOG_FILE)) else { return 0 };
    let Ok(size) = file.metadata().map(|m| m.len()) else { return 0 };
    let cut = size.saturating_sub(LOG_RING_BYTES) / BLOCK * BLOCK;
    let punched =
        std::fs::read_to_string(rental_dir.join(PUNCHED_FILE)).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0u64);
    if cut < punched + (1 << 20) {
        return 0;
    }
    let (Ok(from), Ok(len)) = (i64::try_from(punched), i64::try_from(cut - punched)) else { return 0 };
    match fallocate(&file, FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE, from, len) {
        Ok(()) => {
            let _ = std::fs::write(rental_dir.join(PUNCHED_FILE), cut.to_string());
            cut - punched
        }
        Err(_) => 0,
    }
}

/// How far the log has been punched out, so each trim frees only what is new.
const PUNCHED_FILE: &str = "workload.log.punched";

#[cfg(test)]
mod tests {
    use super::*;
    use std::{io::Write, os::unix::fs::MetadataExt};

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cardpool-logs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn reading_on_from_end_misses_and_repeats_nothing() {
        let dir = dir("read");
        assert!(read(&dir, Some(0), 100, true).unwrap_err().contains("no log"));
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(LOG_FILE)).unwrap();
        let mut written = String::new();
        for i in 0..100 {
            let line = format!("line {i}\n");
            log.write_all(line.as_bytes()).unwrap();
            written.push_str(&line);
        }
        // Small chunks end at whole lines and chain exactly.
        let mut read_back = String::new();
        let mut offset = 0;
        loop {
            let chunk = read(&dir, Some(offset), 64, true).unwrap();
            assert_eq!(chunk.offset, offset);
            assert_eq!(chunk.skipped, 0);
            if chunk.data.is_empty() {
                break;
            }
            assert!(chunk.data.ends_with('\n'), "{:?}", chunk.data);
            read_back.push_str(&chunk.data);
            offset = chunk.end;
        }
        assert_eq!(read_back, written);
        // The tail, and past the end.
        let tail = read(&dir, None, 16, false).unwrap();
        assert_eq!(tail.data, "line 98\nline 99\n");
        assert_eq!(read(&dir, None, 10, false).unwrap().data, "line 99\n", "a tail starts at a line");
        assert!(!tail.running);
        let past = read(&dir, Some(1 << 40), 16, true).unwrap();
        assert_eq!((past.offset, past.data.as_str()), (written.len() as u64, ""));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_the_last_ring_is_kept_and_offsets_never_move() {
        let dir = dir("ring");
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(LOG_FILE)).unwrap();
        let line = [b'x'; 1023];
        for _ in 0..(10 << 10) {
            log.write_all(&line).unwrap();
            log.write_all(b"\n").unwrap();
        }
        let size = 10u64 << 20;
        let freed = trim(&dir);
        assert!((2 << 20..(2 << 20) + BLOCK).contains(&freed), "{freed}");
        assert_eq!(trim(&dir), 0, "nothing new to free");
        let meta = std::fs::metadata(dir.join(LOG_FILE)).unwrap();
        assert_eq!(meta.len(), size, "offsets stay put");
        assert!(meta.blocks() * 512 <= LOG_RING_BYTES + (1 << 20), "{} bytes on disk", meta.blocks() * 512);
        // The writer appends on; a reader from the start learns what it missed.
        log.write_all(b"after\n").unwrap();
        let chunk = read(&dir, Some(0), 1024, true).unwrap();
        assert_eq!(chunk.offset, size + 6 - LOG_RING_BYTES);
        assert_eq!(chunk.skipped, chunk.offset);
        assert!(!chunk.data.contains('\0'), "never reads the punched part");
        let tail = read(&dir, None, 100, true).unwrap();
        assert!(tail.data.ends_with("after\n"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
