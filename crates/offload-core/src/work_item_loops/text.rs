//! LLVM IR text, as `opt -S` prints it: functions, blocks, local names,
//! the operands of plain loads and stores.

use super::*;

/// Byte range of function `name`'s definition (its `define` line to its
/// closing brace and newline).
pub(super) fn function_span(module: &str, name: &str) -> Option<(usize, usize)> {
    let head = format!("@{name}(");
    let mut at = 0;
    for line in module.split_inclusive('\n') {
        if line.starts_with("define ") && line.contains(&head) {
            let rest = &module[at..];
            let close = rest.find("\n}\n")?;
            return Some((at, at + close + 3));
        }
        at += line.len();
    }
    None
}

/// A function's parts: its `define` line and its lines up to `}`.
pub(super) struct Function<'a> {
    pub(super) define: &'a str,
    pub(super) body: Vec<&'a str>,
}

pub(super) fn split_function(text: &str) -> Function<'_> {
    let mut lines = text.lines();
    let define = lines.next().unwrap_or("");
    let body = lines.take_while(|l| *l != "}").collect();
    Function { define, body }
}

/// The parameters' names (`%arg`, `%arg1`) of a `define` line.
pub(super) fn parameter_names(define: &str) -> Vec<String> {
    let open = define.find('(').map(|i| i + 1).unwrap_or(0);
    let mut depth = 0;
    let mut params = Vec::new();
    let mut current = String::new();
    for c in define[open..].chars() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                params.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    params.push(current);
    params
        .iter()
        .filter_map(|p| p.split_whitespace().last())
        .filter(|t| t.starts_with('%'))
        .map(String::from)
        .collect()
}

/// Local names (`%x`, `%"a b"`) in `line`, with their byte ranges.
pub(super) fn locals(line: &str) -> Vec<(usize, usize)> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let start = i;
            i += 1;
            if i < b.len() && b[i] == b'"' {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += 1;
                }
                i += 1;
            } else {
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'-' | b'$' | b'.' | b'_'))
                {
                    i += 1;
                }
            }
            if i > start + 1 {
                out.push((start, i.min(b.len())));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The defined name of an instruction line (`%x = ...`).
pub(super) fn defined(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let (name, rest) = t.split_once(" = ")?;
    (name.starts_with('%') && !name.contains(' '))
        .then_some(name)
        .filter(|_| !rest.is_empty())
}

/// A block label line's name (`bb12:  ; preds = ...`).
pub(super) fn label(line: &str) -> Option<&str> {
    if line.starts_with(' ') || line.is_empty() {
        return None;
    }
    let (name, _) = line.split_once(':')?;
    (!name.is_empty()
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'$' | b'.' | b'_')))
    .then_some(name)
}

/// What a call instruction calls: `@f(...)` or `%p(...)` (text from the
/// callee on), for `call`/`tail call` lines.
pub(super) fn call_of(t: &str) -> Option<&str> {
    let rest = t.split_once(" = ").map(|(_, r)| r).unwrap_or(t);
    let rest = rest
        .trim_start_matches("tail ")
        .trim_start_matches("musttail ")
        .trim_start_matches("notail ");
    let rest = rest.strip_prefix("call ")?;
    // Skip the return type and attributes up to the callee.
    let at = rest.find(['@', '%'])?;
    Some(&rest[at..])
}

/// A basic block of the final copy.
pub(super) struct Block {
    pub(super) label: String,
    pub(super) lines: Vec<String>,
}

impl Block {
    pub(super) fn successors(&self) -> Vec<String> {
        let mut out = Vec::new();
        // The terminator: the last line, or a switch's bracketed lines.
        let start = self
            .lines
            .iter()
            .rposition(|l| {
                let t = l.trim_start();
                t.starts_with("br ")
                    || t.starts_with("switch ")
                    || t.starts_with("ret ")
                    || t == "unreachable"
            })
            .unwrap_or(self.lines.len());
        for line in &self.lines[start..] {
            let mut rest = line.as_str();
            while let Some(at) = rest.find("label %") {
                let name: String = rest[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '$' | '.' | '_'))
                    .collect();
                out.push(name);
                rest = &rest[at + 7..];
            }
        }
        out
    }
}

pub(super) fn blocks_of(body: &[&str]) -> Result<Vec<Block>, String> {
    let mut blocks: Vec<Block> = Vec::new();
    for (i, line) in body.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(name) = label(line) {
            blocks.push(Block {
                label: name.to_string(),
                lines: Vec::new(),
            });
        } else if line.starts_with(|c: char| !c.is_whitespace()) && !line.starts_with(';') {
            return Err(format!("unexpected line {i}: {line}"));
        } else {
            if blocks.is_empty() {
                blocks.push(Block {
                    label: "wil.entry0".into(),
                    lines: Vec::new(),
                });
            }
            blocks.last_mut().unwrap().lines.push(line.to_string());
        }
    }
    Ok(blocks)
}

/// Each block's position, by label.
pub(super) fn block_index(blocks: &[Block]) -> HashMap<&str, usize> {
    blocks
        .iter()
        .enumerate()
        .map(|(i, b)| (b.label.as_str(), i))
        .collect()
}

/// Each block's successors, as positions.
pub(super) fn successor_indices(blocks: &[Block], index: &HashMap<&str, usize>) -> Vec<Vec<usize>> {
    let known = |b: &Block| -> Vec<usize> {
        b.successors()
            .iter()
            .filter_map(|s| index.get(s.as_str()).copied())
            .collect()
    };
    blocks.iter().map(known).collect()
}

/// For `%x = load T, ptr %p, ...` and `store T v, ptr %p, ...` (not
/// volatile or atomic): where `%p` starts, and whether it is a load.
pub(super) fn pointer_operand(line: &str) -> Option<(usize, bool)> {
    let t = line.trim_start();
    let is_load = defined(line).is_some() && line.contains(" = load ");
    let is_store = t.starts_with("store ");
    if !(is_load || is_store) || t.contains("volatile") || t.contains("atomic") {
        return None;
    }
    // The pointer is the last `ptr %name` before `, align` (or the end).
    let cut = line.find(", align").unwrap_or(line.len());
    let at = line[..cut].rfind(", ptr %")? + 6;
    Some((at, is_load))
}

/// The pointer a plain load reads.
pub(super) fn load_pointer(line: &str) -> Option<&str> {
    let (at, true) = pointer_operand(line)? else {
        return None;
    };
    let &(s, e) = locals(&line[at..]).first()?;
    Some(&line[at + s..at + e])
}
