//! The benchmarks' markdown tables: number formatting and a table that prints its header, its
//! alignment row and its rows. Shared by the runtime benchmark's report and the polyglot
//! benchmark (included by `#[path]`, as the harness is).

/// `1234567.8` as `1,234,568`.
pub fn ns(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `bytes` in MiB with one decimal: `12.3 MiB`.
pub fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// A markdown table: the first column left-aligned (what is measured), the others as given.
pub struct Table {
    header: Vec<String>,
    /// `---` (text) or `--:` (figures), one per column.
    align: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose first column is `what` (text) and whose other columns hold figures.
    pub fn new(what: &str, figures: &[String]) -> Self {
        let header: Vec<String> = std::iter::once(what.to_owned())
            .chain(figures.iter().cloned())
            .collect();
        let mut align = vec!["--:"; header.len()];
        align[0] = "---";
        Self {
            header,
            align,
            rows: Vec::new(),
        }
    }

    /// Makes column `i` a text column (left-aligned).
    #[must_use]
    pub fn text_column(mut self, i: usize) -> Self {
        self.align[i] = "---";
        self
    }

    /// Adds a row (one cell per column).
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len(), "one cell per column");
        self.rows.push(cells);
    }

    /// Prints the table as markdown on stdout.
    pub fn print(&self) {
        println!("| {} |", self.header.join(" | "));
        println!("|{}|", self.align.join("|"));
        for row in &self.rows {
            println!("| {} |", row.join(" | "));
        }
    }
}
