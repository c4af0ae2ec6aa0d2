//! How the CLI prints for people: aligned tables, dollars, times and sizes.

use cardpool_domain::money::format_dollars;
use chrono::{DateTime, Utc};
use std::io::Write;

/// Prints `rows` under `headers`, each column as wide as its widest cell.
pub fn print(out: &mut dyn Write, headers: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        padded.join("  ").trim_end().to_owned()
    };
    writeln!(out, "{}", line(headers.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

/// `$2.49`: micro-dollars as people read them.
pub fn dollars(micros: i64) -> String {
    match format_dollars(micros) {
        negative if negative.starts_with('-') => format!("-${}", &negative[1..]),
        positive => format!("${positive}"),
    }
}

/// `2026-12-02 21:56 UTC`.
pub fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// `80 GiB`, whole GiB.
pub fn gib(bytes: i64) -> String {
    format!("{} GiB", bytes.max(0) >> 30)
}

/// `1h 02m 03s`.
pub fn duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, secs) => format!("{secs}s"),
        (0, mins, secs) => format!("{mins}m {secs:02}s"),
        (hours, mins, secs) => format!("{hours}h {mins:02}m {secs:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let mut out = Vec::new();
        let rows = vec![vec!["1".into(), "NVIDIA H100".into()], vec!["12".into(), "L40S".into()]];
        print(&mut out, &["ID", "GPU"], &rows).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "ID  GPU\n1   NVIDIA H100\n12  L40S\n");
    }

    #[test]
    fn people_units() {
        assert_eq!(dollars(2_490_000), "$2.49");
        assert_eq!(dollars(-1_500_000), "-$1.50");
        assert_eq!(dollars(1), "$0.000001");
        assert_eq!(gib(80 << 30), "80 GiB");
        assert_eq!((duration(59), duration(61), duration(3723)), ("59s".into(), "1m 01s".into(), "1h 02m 03s".into()));
    }
}
