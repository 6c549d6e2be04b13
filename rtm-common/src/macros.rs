//! The macro that declares the ABI's enums.

/// Declares a `#[repr(u32)]` enum with explicit discriminants, `ALL` and a checked
/// `from_u32`, so a new variant cannot be forgotten in the conversion.
macro_rules! abi_enum {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $v:ident = $n:literal,)+ }) => {
        $(#[$m])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "user", serde(rename_all = "snake_case"))]
        pub enum $name { $($(#[$vm])* $v = $n,)+ }

        impl $name {
            /// Every variant, in discriminant order.
            pub const ALL: &'static [$name] = &[$($name::$v,)+];

            /// Converts a raw discriminant; `None` for a value this build does not know.
            pub const fn from_u32(v: u32) -> Option<Self> {
                match v {
                    $($n => Some($name::$v),)+
                    _ => None,
                }
            }
        }
    };
}
