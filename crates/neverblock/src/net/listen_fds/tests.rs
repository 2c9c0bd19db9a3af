use super::*;

/// What `handed` makes of `vars`, for process 100 whose parent is 50.
fn check(vars: &[(&str, &str)]) -> Result<Handed, String> {
    let var = |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned());
    handed(var, 100, Some(50)).map_err(|e| e.to_string())
}

/// Variables, and what they say.
type Case = (&'static [(&'static str, &'static str)], Result<Handed, String>);

fn here(names: &[&str]) -> Result<Handed, String> {
    Ok(Handed::Here(names.iter().map(|n| (*n).to_owned()).collect()))
}

#[test]
fn the_variables_say_what_was_handed_to_whom() {
    let elsewhere = |why: &str| Ok(Handed::Elsewhere(why.to_owned()));
    let cases: &[Case] = &[
        (&[], Ok(Handed::Nothing)),
        (&[("LISTEN_PID", "100")], Ok(Handed::Nothing)),
        (&[("LISTEN_FDS", "2"), ("LISTEN_PID", "100")], here(&["unknown", "unknown"])),
        (&[("LISTEN_FDS", "2"), ("LISTEN_PID", "100"), ("LISTEN_FDNAMES", "web:tls")], here(&["web", "tls"])),
        // Names that do not match the count are dropped, as systemd's sd_listen_fds_with_names does.
        (&[("LISTEN_FDS", "2"), ("LISTEN_PID", "100"), ("LISTEN_FDNAMES", "web")], here(&["unknown", "unknown"])),
        (&[("LISTEN_FDS", "1"), ("LISTEN_PID", "7")], elsewhere("LISTEN_PID is 7, not this process's 100")),
        (&[("LISTEN_FDS", "1")], elsewhere("LISTEN_FDS is set without LISTEN_PID")),
        (&[("LISTEN_FDS", "1"), (PARENT_PID_VAR, "50")], here(&["unknown"])),
        (
            &[("LISTEN_FDS", "1"), (PARENT_PID_VAR, "51")],
            elsewhere("NEVERBLOCK_LISTEN_PARENT_PID is 51, not this process's parent (50)"),
        ),
        // systemd's own variable wins over the one a parent sets.
        (
            &[("LISTEN_FDS", "1"), ("LISTEN_PID", "7"), (PARENT_PID_VAR, "50")],
            elsewhere("LISTEN_PID is 7, not this process's 100"),
        ),
        (&[("LISTEN_FDS", "two"), ("LISTEN_PID", "100")], Err("LISTEN_FDS is not a number: \"two\"".to_owned())),
        (&[("LISTEN_FDS", "1"), ("LISTEN_PID", "-3")], Err("LISTEN_PID is not a number: \"-3\"".to_owned())),
    ];
    for (vars, expected) in cases {
        assert_eq!(&check(vars), expected, "{vars:?}");
    }
}
