//! What a stdio upstream inherits of the gateway's environment, and the marker that keeps a
//! gateway from running inside a gateway.
//!
//! A stdio server starts with an empty environment, then gets: the variables of
//! [`DEFAULT_INHERITED`] that the gateway has (the set the official MCP SDKs pass), or more with
//! the entry's `inheritEnv`; then the entry's own `env`; then [`GATEWAY_DEPTH_VAR`]. Variables
//! named `TOOLSEARCH_*` and those `[[rest.tokens]]` read secrets from are never inherited (only
//! an entry's `env` can give them), so the gateway's tokens do not reach an upstream.

use std::ffi::{OsStr, OsString};

use crate::config::{InheritEnv, GATEWAY_VAR_PREFIX};

/// The variables every stdio server inherits when the gateway has them: those of the official
/// MCP SDKs (Python's `DEFAULT_INHERITED_ENV_VARS`, TypeScript's `getDefaultEnvironment`), plus
/// the locale, the temporary folder and the time zone, which programs need to read file names,
/// write scratch files and print times as the user expects.
#[cfg(not(windows))]
pub const DEFAULT_INHERITED: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", // the SDKs' set
    "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
];

/// The variables every stdio server inherits when the gateway has them (see the Unix list).
#[cfg(windows)]
pub const DEFAULT_INHERITED: &[&str] = &[
    "APPDATA",
    "HOMEDRIVE",
    "HOMEPATH",
    "LOCALAPPDATA",
    "PATH",
    "PROCESSOR_ARCHITECTURE",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "USERNAME",
    "USERPROFILE", // the SDKs' set
    "PATHEXT",
    "TMP",
];

/// How many gateways are above this process: every stdio server gets this gateway's depth plus
/// one, and `toolsearch serve` refuses to start at a depth of 1 or more.
pub const GATEWAY_DEPTH_VAR: &str = "TOOLSEARCH_GATEWAY_DEPTH";

/// This process's depth: 0 unless a gateway started it (directly or through a wrapper such as
/// `npx` or a shell, which pass the variable on). A value that is not a number counts as 1, so
/// that a marker mangled on the way still stops the chain.
pub fn gateway_depth() -> u32 {
    match std::env::var(GATEWAY_DEPTH_VAR) {
        Ok(value) if value.trim().is_empty() => 0,
        Ok(value) => value.trim().parse().unwrap_or(1),
        Err(std::env::VarError::NotPresent) => 0,
        Err(std::env::VarError::NotUnicode(_)) => 1,
    }
}

/// The depth a stdio server of this gateway gets.
pub fn child_depth() -> String {
    gateway_depth().saturating_add(1).to_string()
}

/// The gateway's variables a stdio server inherits under `inherit`; `withheld` names more
/// variables never to pass (the `[[rest.tokens]]` secrets).
pub fn inherited(inherit: &InheritEnv, withheld: &[String]) -> Vec<(OsString, OsString)> {
    inherited_from(std::env::vars_os(), inherit, withheld)
}

fn inherited_from(
    vars: impl Iterator<Item = (OsString, OsString)>,
    inherit: &InheritEnv,
    withheld: &[String],
) -> Vec<(OsString, OsString)> {
    vars.filter(|(name, value)| {
        let Some(name) = name.to_str() else {
            // A name that is not Unicode is nothing the defaults or a list can name.
            return matches!(inherit, InheritEnv::All);
        };
        if starts_with(name, GATEWAY_VAR_PREFIX) || withheld.iter().any(|w| same_name(name, w)) {
            return false;
        }
        let listed = |names: &[&str]| names.iter().any(|n| same_name(name, n));
        match inherit {
            InheritEnv::All => true,
            InheritEnv::Defaults => listed(DEFAULT_INHERITED) && !is_shell_function(value),
            InheritEnv::Names(names) => {
                (listed(DEFAULT_INHERITED) && !is_shell_function(value))
                    || names.iter().any(|pattern| match pattern.strip_suffix('*') {
                        Some(prefix) => starts_with(name, prefix),
                        None => same_name(name, pattern),
                    })
            }
        }
    })
    .collect()
}

/// A bash function exported into the environment (`() { ...`), which the SDKs skip too.
fn is_shell_function(value: &OsStr) -> bool {
    value.to_str().is_some_and(|v| v.starts_with("()"))
}

/// Variable names compare without case on Windows, exactly elsewhere.
fn same_name(a: &str, b: &str) -> bool {
    if cfg!(windows) {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

fn starts_with(name: &str, prefix: &str) -> bool {
    name.get(..prefix.len())
        .is_some_and(|head| same_name(head, prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("LANG", "C.UTF-8"),
            ("TOOLSEARCH_API_TOKENS", "secret"),
            ("TOOLSEARCH_GATEWAY_DEPTH", "0"),
            ("CI_TOKEN", "scoped-secret"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("npm_config_proxy", "http://proxy"),
            ("npm_config_cache", "/tmp/npm"),
            ("SHELL", "() { :; }"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    fn names(inherit: &InheritEnv) -> Vec<String> {
        let withheld = ["CI_TOKEN".to_string()];
        inherited_from(vars().into_iter(), inherit, &withheld)
            .into_iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_default_set_leaves_secrets_and_the_gateways_own_variables_out() {
        assert_eq!(names(&InheritEnv::Defaults), ["PATH", "HOME", "LANG"]);
    }

    #[test]
    fn a_list_adds_names_and_prefixes() {
        let list = InheritEnv::Names(vec!["AWS_SECRET_ACCESS_KEY".into(), "npm_config_*".into()]);
        assert_eq!(
            names(&list),
            [
                "PATH",
                "HOME",
                "LANG",
                "AWS_SECRET_ACCESS_KEY",
                "npm_config_proxy",
                "npm_config_cache"
            ]
        );
    }

    #[test]
    fn everything_is_everything_but_the_gateways_secrets() {
        let all = names(&InheritEnv::All);
        assert!(all.contains(&"AWS_SECRET_ACCESS_KEY".to_string()));
        assert!(all.contains(&"SHELL".to_string()));
        for secret in [
            "TOOLSEARCH_API_TOKENS",
            "TOOLSEARCH_GATEWAY_DEPTH",
            "CI_TOKEN",
        ] {
            assert!(!all.contains(&secret.to_string()), "{secret}");
        }
    }
}
