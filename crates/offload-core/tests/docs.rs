//! The repository's documentation is self-contained and honest:
//!
//! * no Markdown file links outside the repository (no `http(s)://` at all,
//!   no relative link to a missing file or to a path above the repository
//!   root), no link to a `#anchor` that is not a heading (GitHub's slug) or
//!   an `<a id>`/`<a name>` of the file it points into, and no doc comment
//!   of the Rust sources carries an `http(s)://` link;
//! * `docs/environment.md` lists exactly the environment variables the code
//!   under `crates/*/src` and `plugins/*/src` reads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Directories never searched: build outputs, git's own files, fuzzing data.
fn ignored_dir(rel: &Path) -> bool {
    let s = rel.to_string_lossy();
    matches!(
        s.as_ref(),
        "target" | ".git" | "fuzz/target" | "fuzz/corpus" | "fuzz/artifacts"
    )
}

fn walk(root: &Path, dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let rel = path.strip_prefix(root).unwrap().to_path_buf();
        let Ok(ty) = e.file_type() else { continue };
        if ty.is_dir() {
            if !ignored_dir(&rel) {
                walk(root, &path, keep, out);
            }
        } else if ty.is_file() && keep(&rel) {
            out.push(rel);
        }
    }
}

/// The tracked Markdown files (`git ls-files`), or every `.md` file of the
/// tree outside build outputs where git is not available.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let git = std::process::Command::new("git")
        .args(["ls-files", "-z", "--", "*.md"])
        .current_dir(root)
        .output();
    let mut files: Vec<PathBuf> = match git {
        Ok(o) if o.status.success() => o
            .stdout
            .split(|b| *b == 0)
            .filter(|f| !f.is_empty())
            .map(|f| PathBuf::from(String::from_utf8_lossy(f).into_owned()))
            // A file deleted in the work tree but still in the index.
            .filter(|f| root.join(f).exists())
            .collect(),
        _ => {
            let mut v = Vec::new();
            walk(
                root,
                root,
                &|p| p.extension().is_some_and(|e| e == "md"),
                &mut v,
            );
            v
        }
    };
    files.sort();
    assert!(
        files.iter().any(|f| f == Path::new("README.md")),
        "README.md not found among {files:?}"
    );
    files
}

/// Link targets of one Markdown text: inline links `[text](target)` and
/// reference definitions `[label]: target`, outside code blocks and code
/// spans.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop code spans.
        let mut plain = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push((n + 1, target.to_string()));
            rest = &after[end..];
        }
        let t = plain.trim_start();
        if let Some(close) = t.strip_prefix('[').and_then(|r| r.find("]:")) {
            let target = t[close + 3..].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                out.push((n + 1, target.to_string()));
            }
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, every character that is not
/// alphanumeric, `-`, `_` or a blank dropped, blanks turned into `-`.
fn slug(heading: &str) -> String {
    let mut s = String::new();
    for c in heading.trim().chars() {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            s.extend(c.to_lowercase());
        } else if c == ' ' {
            s.push('-');
        }
    }
    s
}

/// The anchors of one Markdown text: its headings' slugs (the second and
/// later of equal ones numbered `-1`, `-2`, ... as GitHub does) and the
/// `id`/`name` of its HTML `<a>` elements.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut in_fence = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if let Some(h) = t.strip_prefix('#') {
            let h = h.trim_start_matches('#');
            if h.starts_with(' ') {
                let base = slug(h.trim_end_matches('#'));
                let n = seen.entry(base.clone()).or_insert(0);
                out.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
        }
        for attr in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(attr) {
                let after = &rest[i + attr.len()..];
                if let Some(end) = after.find('"') {
                    out.insert(after[..end].to_string());
                }
                rest = after;
            }
        }
    }
    out
}

#[test]
fn anchors_are_githubs_slugs() {
    let a = anchors(
        "# One\n## Library sizes, 2026 (release: LTO)\n```\n# not\n```\n## One\n<a id=\"x\"></a>\n",
    );
    let want: BTreeSet<String> = ["one", "library-sizes-2026-release-lto", "one-1", "x"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(a, want);
}

#[test]
fn markdown_links_stay_inside_the_repository() {
    let root = repo_root();
    let mut problems = Vec::new();
    for file in markdown_files(&root) {
        let text = std::fs::read_to_string(root.join(&file)).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains("http://") || line.contains("https://") {
                problems.push(format!(
                    "{}:{}: links outside the repository: {}",
                    file.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
        let dir = root.join(&file).parent().unwrap().to_path_buf();
        for (line, target) in link_targets(&text) {
            let path = target.split('#').next().unwrap();
            if target.contains("://") || target.starts_with("mailto:") {
                // URLs are reported above.
                continue;
            }
            if let Some((_, anchor)) = target.split_once('#') {
                let into = if path.is_empty() {
                    root.join(&file)
                } else if let Some(abs) = path.strip_prefix('/') {
                    root.join(abs)
                } else {
                    dir.join(path)
                };
                if into.extension().is_some_and(|e| e == "md") {
                    if let Ok(md) = std::fs::read_to_string(&into) {
                        if !anchors(&md).contains(anchor) {
                            problems.push(format!(
                                "{}:{line}: link to {target}: no heading or anchor `{anchor}` there",
                                file.display()
                            ));
                        }
                    }
                }
            }
            if path.is_empty() {
                continue;
            }
            let resolved = if let Some(abs) = path.strip_prefix('/') {
                root.join(abs)
            } else {
                dir.join(path)
            };
            match resolved.canonicalize() {
                Ok(p) if p.starts_with(&root) => {}
                Ok(p) => problems.push(format!(
                    "{}:{line}: link to {target} leaves the repository ({})",
                    file.display(),
                    p.display()
                )),
                Err(_) => problems.push(format!(
                    "{}:{line}: link to a missing file: {target}",
                    file.display()
                )),
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// Every `.rs` file under `crates/*/src` and `plugins/*/src`.
fn source_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for top in ["crates", "plugins"] {
        let Ok(entries) = std::fs::read_dir(root.join(top)) else {
            continue;
        };
        for e in entries.flatten() {
            // Test-only code (`CI` is read there): not what users set.
            if e.file_name() == "test-support" {
                continue;
            }
            let src = e.path().join("src");
            if src.is_dir() {
                walk(
                    root,
                    &src,
                    &|p| p.extension().is_some_and(|e| e == "rs"),
                    &mut files,
                );
            }
        }
    }
    files.sort();
    assert!(files.len() > 10, "too few sources found: {files:?}");
    files
}

#[test]
fn doc_comments_link_nothing_outside_the_repository() {
    let root = repo_root();
    let mut problems = Vec::new();
    for file in source_files(&root) {
        let text = std::fs::read_to_string(root.join(&file)).unwrap();
        for (n, line) in text.lines().enumerate() {
            let t = line.trim_start();
            if (t.starts_with("///") || t.starts_with("//!"))
                && (t.contains("http://") || t.contains("https://"))
            {
                problems.push(format!("{}:{}: {}", file.display(), n + 1, t));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// A plausible environment variable name: upper case, digits, underscores.
fn env_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars().next().unwrap().is_ascii_uppercase()
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The string literal that starts right after `open` (a `"`), if any.
fn literal_at(s: &str) -> Option<&str> {
    let rest = s.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(&rest[..end])
}

/// Environment variables the sources read: the first argument of
/// `env::var`, `env::var_os`, `getenv` and `EnvFilter::try_from_env` calls,
/// and every string literal that is a whole `LIBOMPTARGET_*`, `OFFLOAD_*`,
/// `OMP_*` or `KMP_*` name (names passed through helpers, constants and
/// config lookups).
fn variables_in_sources(root: &Path) -> BTreeSet<String> {
    const CALLS: [&str; 5] = ["var(", "var_os(", "getenv(", "from_env(", "env::var("];
    const PREFIXES: [&str; 4] = ["LIBOMPTARGET_", "OFFLOAD_", "OMP_", "KMP_"];
    let mut names = BTreeSet::new();
    for file in source_files(root) {
        let text = std::fs::read_to_string(root.join(&file)).unwrap();
        for line in text.lines() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for call in CALLS {
                let mut rest = code;
                while let Some(i) = rest.find(call) {
                    let arg = rest[i + call.len()..].trim_start();
                    if let Some(name) = literal_at(arg).filter(|n| env_name(n)) {
                        names.insert(name.to_string());
                    }
                    rest = &rest[i + call.len()..];
                }
            }
            let mut rest = code;
            while let Some(i) = rest.find('"') {
                let Some(lit) = literal_at(&rest[i..]) else {
                    break;
                };
                // A bare prefix (`"OFFLOAD_"`, a name test) names nothing.
                if env_name(lit)
                    && !lit.ends_with('_')
                    && PREFIXES.iter().any(|p| lit.starts_with(p))
                {
                    names.insert(lit.to_string());
                }
                rest = &rest[i + lit.len() + 2..];
            }
        }
    }
    names
}

/// The first-column names of the table under "## Variables the code reads".
fn variables_in_table(root: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root.join("docs/environment.md"))
        .expect("docs/environment.md exists");
    let mut names = BTreeSet::new();
    let mut in_section = false;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            in_section = h.trim() == "Variables the code reads";
            continue;
        }
        if !in_section {
            continue;
        }
        if let Some(cell) = line.strip_prefix("| `") {
            let name = cell.split('`').next().unwrap();
            assert!(
                names.insert(name.to_string()),
                "{name} is listed twice in docs/environment.md"
            );
        }
    }
    assert!(
        !names.is_empty(),
        "docs/environment.md has no table under '## Variables the code reads'"
    );
    names
}

#[test]
fn environment_table_lists_exactly_what_the_code_reads() {
    let root = repo_root();
    let code = variables_in_sources(&root);
    let table = variables_in_table(&root);
    // Sanity: the scan finds the well-known ones.
    for v in [
        "LIBOMPTARGET_DEBUG",
        "OFFLOAD_PLUGINS",
        "OFFLOAD_TRACE",
        "HOME",
    ] {
        assert!(code.contains(v), "source scan missed {v}: {code:?}");
    }
    let missing: Vec<_> = code.difference(&table).collect();
    let stale: Vec<_> = table.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/environment.md is out of date.\n  read by the code but not in the table: {missing:?}\n  in the table but never read by the code: {stale:?}"
    );
}

#[test]
fn readme_links_the_environment_table() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    assert!(
        readme.contains("(docs/environment.md)"),
        "README.md does not link docs/environment.md"
    );
}
