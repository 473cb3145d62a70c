//! Steps 2 and 4: the kernel's copy with its barrier calls replaced by the
//! marker, and each marker made the end of its block.

use super::*;

/// Step 2: the kernel's copy with every barrier call replaced by the
/// marker; `Ok(None)` when it has no barrier call.
pub(super) fn marked_copy(module: &str, kernel: &str) -> Result<Option<String>, String> {
    let (start, end) = function_span(module, kernel).ok_or("no definition")?;
    let f = split_function(&module[start..end]);
    if f.define.contains("!dbg") || f.define.contains("personality") {
        return Err("debug info or exceptions".into());
    }
    let params = parameter_names(f.define);
    let [_, item] = params.as_slice() else {
        return Err("not the (args, item) signature".into());
    };
    let defs: HashMap<&str, &str> = f
        .body
        .iter()
        .filter_map(|l| Some((defined(l)?, *l)))
        .collect();
    let is_barrier_pointer = |callee: &str| -> bool {
        let Some(load) = defs.get(callee) else {
            return false;
        };
        let Some(from) = load.split_once("= load ptr, ptr ").map(|(_, r)| r) else {
            return false;
        };
        let Some(gep) = from.split(',').next().and_then(|g| defs.get(g.trim())) else {
            return false;
        };
        let gep = gep.split_once(" = ").map(|(_, r)| r).unwrap_or("");
        gep.starts_with("getelementptr")
            && gep.contains(&format!("i8, ptr {item}, i64 {BARRIER_AT}"))
            && !gep.contains('<')
    };
    let mut out = String::new();
    let mut barriers = 0;
    let _ = writeln!(
        out,
        "{}",
        f.define.replacen(
            &format!("@{kernel}("),
            &format!("@{}(", copy_name(kernel)),
            1
        )
    );
    for line in &f.body {
        let t = line.trim_start();
        for bad in [
            "asm ",
            "indirectbr",
            "callbr",
            "invoke ",
            "landingpad",
            "blockaddress",
            "!dbg",
        ] {
            if t.contains(bad) {
                return Err(format!("uses {}", bad.trim()));
            }
        }
        if let Some(call) = call_of(t) {
            if let Some(callee) = call.strip_prefix('%') {
                let callee = format!("%{}", callee.split('(').next().unwrap_or(""));
                if !is_barrier_pointer(&callee) {
                    return Err("an indirect call other than the barrier".into());
                }
                let _ = writeln!(out, "  call void {MARKER}(ptr {item})");
                barriers += 1;
                continue;
            }
            let name = call.split('(').next().unwrap_or("");
            if !name.starts_with("@llvm.")
                && module
                    .lines()
                    .any(|l| l.starts_with("define ") && l.contains(&format!("{name}(")))
            {
                return Err(format!(
                    "calls {name}, defined in the module (it may hold a barrier)"
                ));
            }
        }
        let _ = writeln!(out, "{line}");
    }
    out.push_str("}\n");
    if entry_only_allocas(&f.body).is_err() {
        return Err("a stack allocation outside the entry block".into());
    }
    Ok((barriers > 0).then_some(out))
}

pub(super) fn entry_only_allocas(body: &[&str]) -> Result<(), ()> {
    let mut in_entry = true;
    for (i, line) in body.iter().enumerate() {
        if i > 0 && label(line).is_some() {
            in_entry = false;
        }
        if !in_entry && line.contains(" = alloca ") {
            return Err(());
        }
    }
    Ok(())
}

/// Step 4: each marker call ends its block; the rest starts `wil.bN`.
pub(super) fn split_at_barriers(text: &str) -> String {
    let mut out = String::new();
    let mut n = 0;
    for line in text.split_inclusive('\n') {
        out.push_str(line);
        if line
            .trim_start()
            .starts_with(&format!("call void {MARKER}("))
        {
            n += 1;
            let _ = write!(out, "  br label %wil.b{n}\n\nwil.b{n}:\n");
        }
    }
    out
}
