//! LLVM's JIT environment variables (`LIBOMPTARGET_JIT_*`), with the
//! meanings LLVM's offload plugins give them, read at each compilation.

use std::path::PathBuf;

/// What the user asked of the JIT through the environment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Controls {
    /// `LIBOMPTARGET_JIT_OPT_LEVEL` (0-3): the optimisation level, over
    /// the image's own `-O` option and the default.
    pub opt_level: Option<u8>,
    /// `LIBOMPTARGET_JIT_SKIP_OPT`: no optimisation passes (code
    /// generation still at the optimisation level).
    pub skip_opt: bool,
    /// `LIBOMPTARGET_JIT_REPLACEMENT_MODULE`: LLVM IR or bitcode compiled
    /// in place of the image's.
    pub replacement_module: Option<PathBuf>,
    /// `LIBOMPTARGET_JIT_REPLACEMENT_OBJECT`: a finished result loaded in
    /// place of compiling (a relocatable object is linked first).
    pub replacement_object: Option<PathBuf>,
    /// `LIBOMPTARGET_JIT_PRE_OPT_IR_MODULE`: where to write the module as
    /// textual IR before optimisation.
    pub pre_opt_ir: Option<PathBuf>,
    /// `LIBOMPTARGET_JIT_POST_OPT_IR_MODULE`: where to write it after.
    pub post_opt_ir: Option<PathBuf>,
}

impl Controls {
    pub fn from_env() -> Controls {
        Controls::from_lookup(|k| std::env::var(k).ok())
    }

    /// From `lookup` (a variable's value). Values that do not parse are
    /// ignored with a warning, as LLVM keeps the default.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Controls {
        let path = |k: &str| lookup(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let opt_level = lookup("LIBOMPTARGET_JIT_OPT_LEVEL").and_then(|v| {
            let level = v.trim().parse::<u8>().ok().filter(|l| *l <= 3);
            if level.is_none() {
                warn_once(format!(
                    "LIBOMPTARGET_JIT_OPT_LEVEL={v} is not 0, 1, 2 or 3: ignored"
                ));
            }
            level
        });
        let skip_opt = lookup("LIBOMPTARGET_JIT_SKIP_OPT").is_some_and(|v| {
            parse_bool(&v).unwrap_or_else(|| {
                warn_once(format!(
                    "LIBOMPTARGET_JIT_SKIP_OPT={v} is not true or false: ignored"
                ));
                false
            })
        });
        Controls {
            opt_level,
            skip_opt,
            replacement_module: path("LIBOMPTARGET_JIT_REPLACEMENT_MODULE"),
            replacement_object: path("LIBOMPTARGET_JIT_REPLACEMENT_OBJECT"),
            pre_opt_ir: path("LIBOMPTARGET_JIT_PRE_OPT_IR_MODULE"),
            post_opt_ir: path("LIBOMPTARGET_JIT_POST_OPT_IR_MODULE"),
        }
    }

    /// Whether IR is to be written out (the compiler must run, cached or not).
    pub fn dumps_ir(&self) -> bool {
        self.pre_opt_ir.is_some() || self.post_opt_ir.is_some()
    }

    /// What of these changes a compiled result, for the cache key.
    pub fn key(&self) -> String {
        format!("opt={:?} skip={}", self.opt_level, self.skip_opt)
    }
}

/// A warning about a setting, once per process (settings are read at
/// each compilation).
fn warn_once(line: String) {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static SAID: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let said = SAID.get_or_init(Default::default);
    if said
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(line.clone())
    {
        super::warn(&line);
    }
}

/// A boolean as LLVM's runtime reads one: `1`/`true`/`yes`/`on` or
/// `0`/`false`/`no`/`off`, in any case.
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Controls {
        Controls::from_lookup(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn llvms_variables_are_read_with_llvms_meanings() {
        assert_eq!(from(&[]), Controls::default());
        let c = from(&[
            ("LIBOMPTARGET_JIT_OPT_LEVEL", "1"),
            ("LIBOMPTARGET_JIT_SKIP_OPT", "True"),
            ("LIBOMPTARGET_JIT_REPLACEMENT_MODULE", "/m.ll"),
            ("LIBOMPTARGET_JIT_REPLACEMENT_OBJECT", "/o.so"),
            ("LIBOMPTARGET_JIT_PRE_OPT_IR_MODULE", "/pre.ll"),
            ("LIBOMPTARGET_JIT_POST_OPT_IR_MODULE", "/post.ll"),
        ]);
        assert_eq!(c.opt_level, Some(1));
        assert!(c.skip_opt && c.dumps_ir());
        assert_eq!(c.replacement_module, Some("/m.ll".into()));
        assert_eq!(c.replacement_object, Some("/o.so".into()));
        assert_eq!(c.pre_opt_ir, Some("/pre.ll".into()));
        assert_eq!(c.post_opt_ir, Some("/post.ll".into()));
        // What does not parse keeps the default; empty paths are unset.
        let c = from(&[
            ("LIBOMPTARGET_JIT_OPT_LEVEL", "4"),
            ("LIBOMPTARGET_JIT_SKIP_OPT", "maybe"),
            ("LIBOMPTARGET_JIT_PRE_OPT_IR_MODULE", ""),
        ]);
        assert_eq!(c, Controls::default());
        assert!(!from(&[("LIBOMPTARGET_JIT_SKIP_OPT", "off")]).skip_opt);
    }

    #[test]
    fn the_cache_key_follows_what_changes_the_result() {
        let base = from(&[]).key();
        assert_ne!(base, from(&[("LIBOMPTARGET_JIT_OPT_LEVEL", "0")]).key());
        assert_ne!(base, from(&[("LIBOMPTARGET_JIT_SKIP_OPT", "1")]).key());
        assert_eq!(
            base,
            from(&[("LIBOMPTARGET_JIT_POST_OPT_IR_MODULE", "/x.ll")]).key()
        );
    }
}
