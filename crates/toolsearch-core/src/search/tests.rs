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

#[test]
fn the_model_reads_a_query_without_its_keyword_syntax() {
    assert_eq!(
        embeddable_query("((((open issue)) +repo -\"draft\" labe~", 100),
        "open issue repo - draft labe"
    );
    assert_eq!(
        embeddable_query("send an email to bob", 13),
        "send an email"
    );
    assert_eq!(embeddable_query("((((", 100), "");
}
