//! How figures are written for a person: tokens (`80.2K`), costs (`$0.0123`), durations
//! (`1h02m`) and terminal widths. Below every view of the CLI (render, status, log,
//! report …), so that a figure is spelled one way wherever it is shown.

/// Formats a token count the way the banner shows it: one decimal, K or M.
pub fn tokens(count: u64) -> String {
    if count >= 1_000_000 {
        format!("{:.1}M", count as f64 / 1_000_000.0)
    } else {
        format!("{:.1}K", count as f64 / 1_000.0)
    }
}

/// Formats a cost, or `?` when the model's price is unknown.
pub fn cost(cost: Option<f64>) -> String {
    match cost {
        Some(c) => format!("${c:.4}"),
        None => "$?".into(),
    }
}

/// Terminal display width: CJK and fullwidth characters take two columns.
pub fn display_width(text: &str) -> usize {
    text.chars()
        .map(|c| {
            let c = c as u32;
            let wide = (0x1100..=0x115F).contains(&c)
                || (0x2E80..=0xA4CF).contains(&c)
                || (0xAC00..=0xD7A3).contains(&c)
                || (0xF900..=0xFAFF).contains(&c)
                || (0xFE30..=0xFE4F).contains(&c)
                || (0xFF00..=0xFF60).contains(&c)
                || (0xFFE0..=0xFFE6).contains(&c)
                || (0x20000..=0x3FFFD).contains(&c);
            if wide { 2 } else { 1 }
        })
        .sum()
}

/// `1h02m`, `3m05s`, `12.3s`.
pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0);
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}
