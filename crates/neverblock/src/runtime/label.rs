//! Task labels: a task's name and what it is doing now, readable from any thread
//! (the sentinel's), and [`TaskActivity`], the cheap way to say what a task does.
//!
//! A label is made when a task is given a name, and shared by the tasks that inherit
//! it; a task that says what it is doing gets a label of its own first (one
//! allocation, once). Every live label is listed by its address, so a loop publishes
//! its running task's label as one plain number at each switch, and the sentinel
//! finds the label again (or learns it is gone) under the list's lock.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::{Arc, Mutex, Weak};

use super::scheduler;
use crate::poison::IgnorePoison;

/// The bytes of an activity a label keeps; a longer one is cut at a character boundary, with `…`.
pub const ACTIVITY_BYTES: usize = 96;

/// A task's name and its activity.
#[derive(Debug)]
pub(crate) struct Label {
    name: Option<Arc<str>>,
    activity: spin::Mutex<Activity>,
}

/// Every live label, by address: the sentinel's way from a published number to a label.
static LIVE: Mutex<Option<HashMap<usize, Weak<Label>>>> = Mutex::new(None);

impl Label {
    /// A label named `name` (if any), with no activity, listed until it drops.
    pub(crate) fn new(name: Option<Arc<str>>) -> Arc<Label> {
        let label = Arc::new(Label { name, activity: spin::Mutex::new(Activity::default()) });
        LIVE.lock().ignore_poison().get_or_insert_with(HashMap::new).insert(label.key(), Arc::downgrade(&label));
        label
    }

    /// The label published under `key` (`Label::key`), if it is still alive.
    pub(crate) fn find(key: usize) -> Option<Arc<Label>> {
        LIVE.lock().ignore_poison().as_ref()?.get(&key)?.upgrade()
    }

    /// The number that stands for this label in a task's identity: its address, unique while it lives.
    pub(crate) fn key(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    pub(crate) fn name(&self) -> Option<&Arc<str>> {
        self.name.as_ref()
    }

    /// ` "name" doing "GET /"`: the name and activity, each when there is one.
    pub(crate) fn write(&self, out: &mut impl fmt::Write) -> fmt::Result {
        if let Some(name) = &self.name {
            write!(out, " {name:?}")?;
        }
        let activity = self.activity.lock();
        if !activity.as_str().is_empty() {
            write!(out, " doing {:?}", activity.as_str())?;
        }
        Ok(())
    }
}

impl Drop for Label {
    fn drop(&mut self) {
        let key = self as *const Label as usize;
        if let Some(live) = LIVE.lock().ignore_poison().as_mut() {
            live.remove(&key);
        }
    }
}

/// What a task does now: a short text kept inline, so saying it allocates nothing.
#[derive(Debug)]
struct Activity {
    len: usize,
    bytes: [u8; ACTIVITY_BYTES],
}

impl Default for Activity {
    fn default() -> Self {
        Activity { len: 0, bytes: [0; ACTIVITY_BYTES] }
    }
}

impl Activity {
    fn as_str(&self) -> &str {
        // `write_str` copies whole characters only, so the bytes are always UTF-8.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl fmt::Write for Activity {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        const CUT: &str = "…";
        let room = ACTIVITY_BYTES - self.len;
        if s.len() <= room {
            self.bytes[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
            self.len += s.len();
            return Ok(());
        }
        let mut fits = room.saturating_sub(CUT.len());
        while !s.is_char_boundary(fits) {
            fits -= 1;
        }
        self.bytes[self.len..self.len + fits].copy_from_slice(&s.as_bytes()[..fits]);
        self.bytes[self.len + fits..self.len + fits + CUT.len()].copy_from_slice(CUT.as_bytes());
        self.len += fits + CUT.len();
        Err(fmt::Error) // nothing more fits: formatting stops here
    }
}

/// Says what the running task is doing, for the fiber dump
/// ([`dump`](super::dump), [`dump_process`](super::dump_process)) and the stall
/// warning ([`Builder::stall_warning`](super::Builder::stall_warning)): a server's
/// connection says which request its handler serves, a worker which job it runs.
///
/// Made once per task (it gives the task a label of its own, one allocation); each
/// [`set`](TaskActivity::set) then formats into a buffer the label keeps
/// ([`ACTIVITY_BYTES`], longer text is cut), under a lock only the sentinel thread
/// ever contends for: nothing is allocated per call.
///
/// # Examples
///
/// ```
/// use neverblock::runtime::TaskActivity;
///
/// neverblock::run(|| {
///     let activity = TaskActivity::current().unwrap();
///     activity.set(format_args!("GET {}", "/reports/2024"));
///     assert!(neverblock::runtime::dump().unwrap().contains("doing \"GET /reports/2024\""));
///     activity.clear();
///     assert!(!neverblock::runtime::dump().unwrap().contains("doing"));
/// });
/// ```
#[derive(Debug)]
pub struct TaskActivity {
    label: Arc<Label>,
    /// Stays with its task's thread: another task's activity is not its to say.
    _not_send: PhantomData<Rc<()>>,
}

impl TaskActivity {
    /// The activity of the running task; `None` outside a task of a runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(neverblock::runtime::TaskActivity::current().is_none(), "no task runs here");
    /// ```
    pub fn current() -> Option<TaskActivity> {
        let label = scheduler::in_task()?.own_label();
        Some(TaskActivity { label, _not_send: PhantomData })
    }

    /// Says the task is doing `what` now (replacing what it said before).
    ///
    /// # Examples
    ///
    /// ```
    /// neverblock::run(|| {
    ///     let activity = neverblock::runtime::TaskActivity::current().unwrap();
    ///     activity.set(format_args!("resizing {} images", 12));
    ///     assert!(neverblock::runtime::dump().unwrap().contains("doing \"resizing 12 images\""));
    /// });
    /// ```
    pub fn set(&self, what: fmt::Arguments<'_>) {
        let mut activity = self.label.activity.lock();
        activity.len = 0;
        let _cut = activity.write_fmt(what); // an error only says the text was cut
    }

    /// Says the task is doing what `parts`, one after the other, say (replacing what it said
    /// before): [`set`](Self::set) without formatting, for text that is already made, as a
    /// request's method and path.
    ///
    /// # Examples
    ///
    /// ```
    /// neverblock::run(|| {
    ///     let activity = neverblock::runtime::TaskActivity::current().unwrap();
    ///     activity.set_parts(&["GET", " ", "/index.html"]);
    ///     assert!(neverblock::runtime::dump().unwrap().contains("doing \"GET /index.html\""));
    /// });
    /// ```
    pub fn set_parts(&self, parts: &[&str]) {
        let mut activity = self.label.activity.lock();
        activity.len = 0;
        for part in parts {
            let _cut = activity.write_str(part); // an error only says the text was cut
        }
    }

    /// Says the task is doing nothing in particular now.
    ///
    /// # Examples
    ///
    /// ```
    /// neverblock::run(|| {
    ///     let activity = neverblock::runtime::TaskActivity::current().unwrap();
    ///     activity.set(format_args!("busy"));
    ///     activity.clear();
    ///     assert!(!neverblock::runtime::dump().unwrap().contains("busy"));
    /// });
    /// ```
    pub fn clear(&self) {
        self.label.activity.lock().len = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use super::{Activity, Label, ACTIVITY_BYTES};

    #[test]
    fn a_long_activity_is_cut_at_a_character_boundary() {
        let mut activity = Activity::default();
        let long = "é".repeat(ACTIVITY_BYTES);
        assert!(write!(activity, "GET /{long}").is_err());
        let text = activity.as_str();
        assert!(text.len() <= ACTIVITY_BYTES && text.ends_with('…') && text.starts_with("GET /é"), "{text}");
    }

    #[test]
    fn a_label_is_found_by_its_key_while_it_lives() {
        let label = Label::new(Some("worker".into()));
        let key = label.key();
        assert_eq!(Label::find(key).and_then(|l| l.name().cloned()).as_deref(), Some("worker"));
        drop(label);
        assert!(Label::find(key).is_none());
    }
}
