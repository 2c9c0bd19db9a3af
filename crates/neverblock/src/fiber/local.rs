//! Fiber-local storage: values per fiber, where thread-locals would be shared by
//! every fiber of a thread (Ruby's `Fiber[]`).

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use super::switch;

/// One fiber's values, by key; allocated by the first value, so a fiber that
/// uses none costs one word.
#[derive(Default)]
pub(crate) struct Locals {
    #[allow(clippy::box_collection)] // one word in every fiber, not three: most fibers have no locals
    entries: RefCell<Option<Box<Vec<Entry>>>>,
}

struct Entry {
    key: usize,
    value: Rc<dyn Any>,
    inherit: bool,
}

/// The fiber-local values a new fiber starts with: nothing to drop when there
/// are none (the usual case, paid on every spawn).
#[derive(Default)]
pub(crate) struct Inherited(Option<Box<[Shared]>>);

/// A key and the value it shares with the fiber that created this one.
type Shared = (usize, Rc<dyn Any>);

/// What a fiber created now by the running fiber would inherit (for fibers
/// created later on its behalf, such as a runtime task's fiber).
#[inline]
pub(crate) fn inherited_now() -> Inherited {
    switch::with_current(|me| me.locals.inherited())
}

/// Gives the running fiber exactly the values `inherited`, dropping the ones it
/// held first (a runtime's worker fiber, between one task and the next).
#[inline]
pub(crate) fn reset_current(inherited: Inherited) {
    if inherited.0.is_none() && switch::with_current(|me| me.locals.is_empty()) {
        return;
    }
    let held = switch::with_current(|me| me.locals.entries.take());
    drop(held);
    switch::with_current(|me| me.locals.extend(inherited));
}

impl Locals {
    fn is_empty(&self) -> bool {
        self.entries.borrow().is_none()
    }

    /// The entries a fiber created now receives (shared, like Ruby's shallow copy).
    #[inline]
    pub(crate) fn inherited(&self) -> Inherited {
        if self.is_empty() {
            return Inherited::default();
        }
        self.inherited_entries()
    }

    fn inherited_entries(&self) -> Inherited {
        let entries = self.entries.borrow();
        let kept: Vec<_> =
            entries.iter().flat_map(|e| e.iter()).filter(|e| e.inherit).map(|e| (e.key, e.value.clone())).collect();
        Inherited((!kept.is_empty()).then(|| kept.into_boxed_slice()))
    }

    #[inline]
    pub(crate) fn extend(&self, inherited: Inherited) {
        let Some(inherited) = inherited.0 else { return };
        self.extend_with(inherited);
    }

    fn extend_with(&self, inherited: Box<[Shared]>) {
        let mut entries = self.entries.borrow_mut();
        let entries = entries.get_or_insert_with(Box::default);
        entries.extend(inherited.into_vec().into_iter().map(|(key, value)| Entry { key, value, inherit: true }));
    }

    fn get(&self, key: usize) -> Option<Rc<dyn Any>> {
        self.entries.borrow().as_ref()?.iter().find(|e| e.key == key).map(|e| e.value.clone())
    }

    fn set(&self, key: usize, value: Rc<dyn Any>, inherit: bool) {
        let mut entries = self.entries.borrow_mut();
        let entries = entries.get_or_insert_with(Box::default);
        match entries.iter_mut().find(|e| e.key == key) {
            Some(entry) => entry.value = value,
            None => entries.push(Entry { key, value, inherit }),
        }
    }
}

/// A key to a value of type `T` held separately by every fiber (and the root).
/// A fiber's value is made by `init` on first use; a key made with
/// [`inherited`](FiberLocal::inherited) starts, in a new fiber, with the value
/// of the fiber that created it (shared, as Ruby's `Fiber[]` storage is a
/// shallow copy). Declare keys with [`fiber_local!`](crate::fiber_local).
///
/// # Examples
///
/// ```
/// use std::cell::Cell;
/// use neverblock::fiber::Fiber;
///
/// neverblock::fiber_local!(static DEPTH: Cell<u32> = Cell::new(0));
///
/// DEPTH.with(|d| d.set(5));
/// let f = Fiber::new(|_: u32| DEPTH.with(|d| d.get())).unwrap();
/// assert_eq!(f.resume(0).unwrap(), 0, "each fiber has its own value");
/// assert_eq!(DEPTH.with(|d| d.get()), 5);
/// ```
pub struct FiberLocal<T: 'static> {
    init: fn() -> T,
    inherit: bool,
}

impl<T: 'static> FiberLocal<T> {
    /// A key whose value starts as `init()` in every fiber.
    pub const fn new(init: fn() -> T) -> FiberLocal<T> {
        FiberLocal { init, inherit: false }
    }

    /// A key whose value a new fiber takes from the fiber that created it (fibers
    /// spawned on a runtime inherit from their spawner), or `init()` if it had none.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::cell::RefCell;
    /// use neverblock::fiber::FiberLocal;
    ///
    /// static REQUEST_ID: FiberLocal<RefCell<String>> = FiberLocal::inherited(|| RefCell::new(String::new()));
    ///
    /// neverblock::run(|| {
    ///     REQUEST_ID.set(RefCell::new("req-7".into()));
    ///     let child = neverblock::spawn(|| REQUEST_ID.with(|id| id.borrow().clone()));
    ///     assert_eq!(child.join().unwrap(), "req-7");
    /// });
    /// ```
    pub const fn inherited(init: fn() -> T) -> FiberLocal<T> {
        FiberLocal { init, inherit: true }
    }

    fn key(&'static self) -> usize {
        self as *const Self as usize
    }

    /// Runs `f` with the running fiber's value (made on first use).
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        let value = switch::with_current(|me| {
            me.locals.get(self.key()).unwrap_or_else(|| {
                let value: Rc<dyn Any> = Rc::new((self.init)());
                me.locals.set(self.key(), value.clone(), self.inherit);
                value
            })
        });
        f(value.downcast_ref::<T>().expect("a key's values have the key's type"))
    }

    /// Replaces the running fiber's value.
    pub fn set(&'static self, value: T) {
        switch::with_current(|me| me.locals.set(self.key(), Rc::new(value), self.inherit));
    }
}

impl<T: 'static> fmt::Debug for FiberLocal<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FiberLocal").field("inherit", &self.inherit).finish_non_exhaustive()
    }
}

/// Declares a [`FiberLocal`] key: `fiber_local!(static NAME: Type = init);`, or
/// `fiber_local!(inherited static NAME: Type = init);` for a key new fibers inherit.
///
/// # Examples
///
/// ```
/// neverblock::fiber_local!(inherited static USER: String = String::from("anonymous"));
/// USER.with(|u| assert_eq!(u, "anonymous"));
/// ```
#[macro_export]
macro_rules! fiber_local {
    ($vis:vis static $name:ident : $t:ty = $init:expr) => {
        $vis static $name: $crate::fiber::FiberLocal<$t> = $crate::fiber::FiberLocal::new(|| $init);
    };
    (inherited $vis:vis static $name:ident : $t:ty = $init:expr) => {
        $vis static $name: $crate::fiber::FiberLocal<$t> = $crate::fiber::FiberLocal::inherited(|| $init);
    };
}
