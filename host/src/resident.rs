//! Code mapped from files, kept resident only where it runs: the host's own executable
//! ([`settle_own_code`]) and plugins' compiled code (`plugin::code`).
//!
//! Code mapped from a file is backed by it: a page given back (`madvise(MADV_DONTNEED)`) comes
//! back from the page cache, unchanged and without a read, when it runs again. Two things of the
//! kernel's decide what stays resident:
//! - *fault-around*: a fault maps with its page every page of the file the page cache holds within
//!   the same 64 KiB, inside the same mapping (VMA); and since Linux 6.16 a miss in an executable
//!   mapping reads ahead to the mapping's end (`MADV_RANDOM` or not), so the page cache holds
//!   most of it;
//! - *one mapping*: a program's code is one VMA, so each page a call runs brings up to 64 KiB
//!   with it, and code run once (a start, a compile) stays resident with its neighbours.
//!
//! So code is *settled* once its start has run: its mapping is cut into pieces, each its own VMA
//! (every other one marked `MADV_RANDOM`: that keeps neighbours apart and does nothing else to
//! code), and its pages are given back. What runs afterwards comes back a piece at a time.
//! Each piece costs the kernel a VMA (about 200 bytes, outside the process's RSS) and one of
//! `vm.max_map_count`'s (65,530 by default): the pieces of all code together stay within half of
//! it ([`piece_budget`]), and once half of that is taken, code is cut in larger pieces, twice as
//! large each time the part left halves ([`pieces_for`]). Measured in BENCHMARKS.md ("Code
//! resident only where it runs").

use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The host executable's pieces: 16 KiB, a quarter of fault-around's reach. Its code is about
/// 30 MB, so a page each would cost the kernel 1.5 MiB of VMAs to save 2 MiB more of RSS.
const OWN_PIECE: usize = 16 << 10;

/// Code pieces cut in this process, counted against [`piece_budget`].
static PIECES: AtomicUsize = AtomicUsize::new(0);

/// Cuts the mapping `code` (page-aligned, one VMA, read-only and file-backed) in pieces of
/// `piece` bytes (a multiple of the page size), or in fewer, larger ones if the budget is short;
/// returns how many pieces it took from the budget, to give back with [`uncut`].
pub(crate) fn cut(code: Range<usize>, piece: usize) -> usize {
    cut_within(code, piece, &PIECES, piece_budget())
}

/// Returns `pieces` taken by [`cut`] to the budget (their mapping is gone).
pub(crate) fn uncut(pieces: usize) {
    PIECES.fetch_sub(pieces, Ordering::Relaxed);
}

/// The most pieces all code may be cut in: half of `vm.max_map_count`, leaving the other half to
/// the rest of the process (instance pool, stacks, heap).
fn piece_budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|count| count.trim().parse::<usize>().ok())
            .unwrap_or(65_530)
            / 2
    })
}

/// [`cut`], counting in `taken` against `budget`; none if it would leave one piece.
fn cut_within(code: Range<usize>, piece: usize, taken: &AtomicUsize, budget: usize) -> usize {
    let pieces = |taken| pieces_for(code.len(), piece, budget.saturating_sub(taken), budget);
    let Ok(before) = taken.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |taken| {
        let pieces = pieces(taken);
        (pieces >= 2).then_some(taken + pieces)
    }) else {
        return 0;
    };
    let pieces = pieces(before);
    let size = code.len().div_ceil(pieces).next_multiple_of(piece);
    for at in code.clone().step_by(size).skip(1).step_by(2) {
        let len = size.min(code.end - at);
        // SAFETY: `at..at + len` lies in the mapping; `MADV_RANDOM` changes only how the kernel
        // reads it in. A failure leaves the mapping in fewer pieces.
        if unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_RANDOM) } != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not cut a code mapping");
            break;
        }
    }
    pieces
}

/// How many pieces code of `len` bytes is cut in with `free` of `budget` pieces left: pieces of
/// `piece` bytes while half the budget is left, twice as large while a quarter is, and so on, so
/// that a thousand plugins are all cut, the last ones coarser; never more than are left.
fn pieces_for(len: usize, piece: usize, free: usize, budget: usize) -> usize {
    let coarser = budget.div_ceil(2 * free.max(1)).max(1).next_power_of_two();
    (len / (piece * coarser)).min(free)
}

/// Settles the host's own executable, on the background thread: once its start is done (every
/// plugin synced), what only the start ran (parsing, configuration, compiling plugins) need not
/// stay resident.
pub fn settle_own_code_soon() {
    crate::trim::later(settle_own_code);
}

/// Cuts the executable's never-written mappings in pieces and gives back their pages (issue 16
/// and issue 17, item 4: about 18 of the 23 MiB a host held at rest were its code and read-only
/// data).
fn settle_own_code() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    let mut pieces = 0;
    for mapping in unwritten_mappings_of(&smaps, &exe.to_string_lossy()) {
        pieces += cut(mapping.clone(), OWN_PIECE);
        // SAFETY: a read-only mapping of the executable that no page of was ever written (no
        // anonymous page: relocated data keeps one), so a page given back reads as the file's.
        unsafe { give_back(mapping.start, mapping.len()) };
    }
    tracing::debug!(pieces, "the host's code given back");
}

/// The read-only private mappings of `path` in `smaps` with no anonymous (written) page.
fn unwritten_mappings_of(smaps: &str, path: &str) -> Vec<Range<usize>> {
    let mut mappings = Vec::new();
    let mut current: Option<Range<usize>> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some((start, end)) = first.split_once('-')
            && !first.ends_with(':')
        {
            let perms = fields.next().unwrap_or_default();
            let file = fields.nth(3).unwrap_or_default();
            let read_only = perms.starts_with('r') && perms.ends_with('p') && !perms.contains('w');
            current = (read_only && file == path)
                .then(|| {
                    let start = usize::from_str_radix(start, 16).ok()?;
                    let end = usize::from_str_radix(end, 16).ok()?;
                    Some(start..end)
                })
                .flatten();
        } else if first == "Anonymous:"
            && let Some(range) = current.take()
            && fields.next() == Some("0")
        {
            mappings.push(range);
        }
    }
    mappings
}

/// The OS's page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

/// Gives the pages of `start..start + len` back to the OS (`madvise(MADV_DONTNEED)`): a private
/// mapping's pages read as the file's bytes (or zeros, anonymous) when touched again. A failure
/// only leaves them resident.
///
/// # Safety
/// The range is mapped, page-aligned, and nothing relies on what was written there.
pub(crate) unsafe fn give_back(start: usize, len: usize) {
    if len == 0 || !start.is_multiple_of(page_size()) {
        return;
    }
    // SAFETY: the caller's contract.
    if unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) } != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "could not give pages back to the OS"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping of `pages` pages of a file, as code is mapped (read-only, private).
    fn mapped_file(pages: usize) -> (tempfile::NamedTempFile, Range<usize>) {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let len = pages * page_size();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&vec![7u8; len]).unwrap();
        // SAFETY: a fresh read-only mapping of a file this test owns (left mapped).
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_file().as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        (file, at as usize..at as usize + len)
    }

    /// How many mappings lie in `range`.
    fn mappings_in(range: &Range<usize>) -> usize {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|line| {
                let start = line.split('-').next().unwrap();
                range.contains(&usize::from_str_radix(start, 16).unwrap())
            })
            .count()
    }

    /// The pieces stay within the budget: as asked while half of it is left, larger ones as it
    /// runs short, none when they would be fewer than two.
    #[test]
    fn cuts_stay_within_the_budget() {
        let page = page_size();
        let (_file, code) = mapped_file(16);
        let taken = AtomicUsize::new(0);
        assert_eq!(cut_within(code.clone(), page, &taken, 100), 16);
        assert_eq!(mappings_in(&code), 16);
        assert_eq!(taken.load(Ordering::Relaxed), 16);

        let (_file, code) = mapped_file(16);
        assert_eq!(cut_within(code.clone(), 2 * page, &taken, 100), 8);
        assert_eq!(mappings_in(&code), 8);
        assert_eq!(taken.load(Ordering::Relaxed), 24);

        // 30 of 100 left: pieces of two pages.
        let (_file, code) = mapped_file(16);
        let taken = AtomicUsize::new(70);
        assert_eq!(cut_within(code.clone(), page, &taken, 100), 8);
        assert_eq!(mappings_in(&code), 8);
        assert_eq!(taken.load(Ordering::Relaxed), 78);

        // 10 of 100 left: pieces of eight pages.
        let (_file, code) = mapped_file(16);
        let taken = AtomicUsize::new(90);
        assert_eq!(cut_within(code.clone(), page, &taken, 100), 2);
        assert_eq!(mappings_in(&code), 2);
        assert_eq!(taken.load(Ordering::Relaxed), 92);

        let (_file, code) = mapped_file(16);
        let taken = AtomicUsize::new(99);
        assert_eq!(cut_within(code.clone(), page, &taken, 100), 0);
        assert_eq!(mappings_in(&code), 1);
        assert_eq!(taken.load(Ordering::Relaxed), 99);
    }

    /// A thousand plugins of 55 pages each, after the host's 2,000 pieces, fit the default budget:
    /// every one is cut, the first ones a page a piece.
    #[test]
    fn a_thousand_plugins_are_all_cut() {
        let (page, budget) = (4096, 65_530 / 2);
        let mut taken = 2_000;
        let mut per_plugin = Vec::new();
        for _ in 0..1000 {
            let pieces = pieces_for(55 * page, page, budget - taken, budget);
            taken += pieces;
            per_plugin.push(pieces);
        }
        assert_eq!(per_plugin[0], 55);
        assert!(per_plugin.iter().all(|&p| p >= 2), "{per_plugin:?}");
        assert!(taken <= budget);
    }

    /// Only read-only private mappings of the file with no written page are settled.
    #[test]
    fn only_unwritten_read_only_mappings_of_the_executable_are_settled() {
        let smaps = "\
1000-3000 r--p 00000000 fe:00 1 /bin/host
Anonymous:             0 kB
3000-9000 r-xp 00002000 fe:00 1 /bin/host
Rss:                  12 kB
Anonymous:             0 kB
9000-a000 r--p 00008000 fe:00 1 /bin/host
Anonymous:             4 kB
a000-b000 rw-p 00009000 fe:00 1 /bin/host
Anonymous:             0 kB
b000-c000 r-xp 00000000 fe:00 2 /lib/other.so
Anonymous:             0 kB
c000-d000 r-xs 00000000 fe:00 1 /bin/host
Anonymous:             0 kB
";
        assert_eq!(
            unwritten_mappings_of(smaps, "/bin/host"),
            vec![0x1000..0x3000, 0x3000..0x9000]
        );
    }
}
