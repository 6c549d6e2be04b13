//! Facts about the machine the tracer runs on.

use std::io;

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// CPUs listed in /sys/devices/system/cpu/online ("0-3,6").
pub fn online_cpus() -> io::Result<Vec<i32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    Ok(parse_cpu_list(&text))
}

fn parse_cpu_list(text: &str) -> Vec<i32> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
            cpus.extend(a..=b);
        }
    }
    cpus
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn cpu_lists_expand_ranges() {
        assert_eq!(parse_cpu_list("0-3,6\n"), [0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("0\n"), [0]);
        assert!(!online_cpus().unwrap().is_empty());
    }

    proptest! {
        #[test]
        fn any_cpu_list_parses(text in "[0-9,\\-\n ]{0,40}") {
            let _ = parse_cpu_list(&text);
        }
    }
}
