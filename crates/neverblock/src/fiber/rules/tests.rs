use super::*;

const CREATED: View = View { created: true, ..NONE };
const NONE: View =
    View { created: false, terminated: false, current: false, resumed: false, resuming: false, yielding: false };

#[test]
fn resume_rules_in_mri_order() {
    let cases: &[(View, Option<&str>)] = &[
        (CREATED, None),
        (View { yielding: true, ..NONE }, None),
        (View { terminated: true, ..NONE }, Some("attempt to resume a terminated fiber")),
        (View { current: true, resumed: true, ..NONE }, Some("attempt to resume the current fiber")),
        (View { resumed: true, resuming: true, ..NONE }, Some("attempt to resume a resumed fiber (double resume)")),
        (View { resuming: true, ..NONE }, Some("attempt to resume a resuming fiber")),
        (NONE, Some("attempt to resume a transferring fiber")),
    ];
    for (view, expected) in cases {
        let got = check_resume(*view).err().map(|e| e.to_string());
        assert_eq!(got.as_deref(), *expected, "{view:?}");
    }
}

#[test]
fn transfer_rules_in_mri_order() {
    let cases: &[(View, Option<&str>)] = &[
        (CREATED, None),
        (NONE, None),
        (View { current: true, ..NONE }, None),
        (View { resuming: true, yielding: true, ..NONE }, Some("attempt to transfer to a resuming fiber")),
        (View { yielding: true, ..NONE }, Some("attempt to transfer to a yielding fiber")),
        (View { terminated: true, ..NONE }, Some("dead fiber called")),
    ];
    for (view, expected) in cases {
        let got = check_transfer(*view).err().map(|e| e.to_string());
        assert_eq!(got.as_deref(), *expected, "{view:?}");
    }
}

#[test]
fn yield_needs_a_resumer() {
    assert!(check_yield(View { resumed: true, current: true, ..NONE }).is_ok());
    assert_eq!(
        check_yield(View { current: true, ..NONE }).unwrap_err().to_string(),
        "attempt to yield on a not resumed fiber"
    );
}
