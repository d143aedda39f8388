use super::*;

#[test]
fn engine_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SearchEngine>();
}

#[test]
fn unquote_strips_one_pair_of_quotes_or_backticks() {
    assert_eq!(unquote("  `read_file` "), "read_file");
    assert_eq!(unquote("\"read_file\""), "read_file");
    assert_eq!(unquote("'read_file'"), "read_file");
    assert_eq!(unquote("read_file"), "read_file");
    assert_eq!(unquote("\"unbalanced"), "\"unbalanced");
}
