//! Numbers and text as the report's tables and chart print them.

/// Fixed-point with `min_decimals`, widened to two significant digits below 1 so small CPU
/// timings do not print as `0.0`.
fn fmt_fixed(v: f64, min_decimals: usize) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a >= 1.0 || a == 0.0 {
        return format!("{v:.min_decimals$}");
    }
    let decimals = ((-a.log10().floor()) as usize + 1).max(min_decimals);
    if decimals > 6 {
        format!("{v:.1e}")
    } else {
        format!("{v:.decimals$}")
    }
}

pub(super) fn fmt_ms(v: f64) -> String {
    fmt_fixed(v, 1)
}

pub(super) fn fmt_s(v: f64) -> String {
    fmt_fixed(v, 2)
}

pub(super) fn fmt_mib(v: f64) -> String {
    if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else {
        fmt_fixed(v, 1)
    }
}

/// Shortest scientific form that gives back the value (tolerances are round numbers: `1e-4`).
pub(super) fn fmt_tolerance(v: f64) -> String {
    for p in 0..4 {
        let s = format!("{v:.p$e}");
        if s.parse::<f64>()
            .is_ok_and(|x| (x - v).abs() <= 1e-9 * v.abs())
        {
            return s;
        }
    }
    format!("{v:.3e}")
}

/// Makes free text safe in a table cell: pipes escaped, line breaks flattened.
pub(super) fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
        .replace("\r\n", " ")
        .replace(['\n', '\r'], " ")
}

pub(super) fn md_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}
