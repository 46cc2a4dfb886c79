//! The canonical form of an entry's `uuid`: what flower mints (36 characters,
//! lowercase hex, hyphens at 8, 13, 18 and 23). Stores and pruning keep such an id as
//! its 16 bytes (a long transcript holds two ids per entry) and any other text as it
//! is, so the mapping stays one to one: a text that is not canonical never becomes a
//! number, and the number gives back exactly the text it came from.

/// The 128 bits of `text` when it is a canonical uuid; `None` for any other text
/// (uppercase, braced, simple or URN forms included). Allocation-free: it runs for
/// every entry appended and every entry a resume reads.
pub(crate) fn canonical(text: &str) -> Option<u128> {
    // 36 characters is the hyphenated form only; the parser checks the hex and the
    // hyphens, and the lowercase rule is checked here.
    if text.len() != 36 || text.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    uuid::Uuid::try_parse(text).ok().map(|id| id.as_u128())
}

/// The text of a canonical uuid's bits (what [`canonical`] read).
pub(crate) fn text(bits: u128) -> String {
    uuid::Uuid::from_u128(bits).hyphenated().to_string()
}
