//! CSV edge cases, and round trips through `.zst` and Parquet.

use std::io::Write;
use std::path::Path;

use podkv_traces::columnar::{ParquetReader, ROWS_PER_GROUP};
use podkv_traces::text::CsvReader;
use podkv_traces::{convert, file, Op, Record, TraceError};

fn parse(text: &str) -> Vec<Result<Record, TraceError>> {
    CsvReader::new(text.as_bytes(), "inline").collect()
}

fn record(i: u64) -> Record {
    Record {
        timestamp: i / 3,
        key: match i % 4 {
            0 => format!("nz:u:{i:08x}"),
            1 => format!("with,comma,{i}"),
            2 => format!("quote\"{i}\""),
            _ => format!("ünïcode-{i}"),
        },
        key_size: (i % 250) as u32,
        value_size: (i * 37 % 100_000) as u32,
        client_id: (i % 17) as u32,
        op: Op::ALL[(i % 11) as usize],
        ttl: if Op::ALL[(i % 11) as usize].stores_value() {
            (i % 7200) as u32
        } else {
            0
        },
    }
}

#[test]
fn quoted_keys_keep_their_commas_and_quotes() {
    let rows = parse("1,\"a,b\",3,4,5,get,0\n2,\"say \"\"hi\"\"\",3,4,5,gets,0\n");
    assert_eq!(rows[0].as_ref().unwrap().key, "a,b");
    assert_eq!(rows[1].as_ref().unwrap().key, "say \"hi\"");
    assert_eq!(rows[1].as_ref().unwrap().op, Op::Gets);
}

#[test]
fn unquoted_commas_belong_to_the_key() {
    let rows = parse("1,ns:a,b,c,3,4,5,set,60\n");
    let r = rows[0].as_ref().unwrap();
    assert_eq!(r.key, "ns:a,b,c");
    assert_eq!(
        (r.key_size, r.value_size, r.client_id, r.op, r.ttl),
        (3, 4, 5, Op::Set, 60)
    );
}

#[test]
fn missing_fields_name_the_line_and_the_field() {
    let rows = parse("1,k,3,4,5,get,0\n2,k,3,4\n");
    assert!(rows[0].is_ok());
    match &rows[1] {
        Err(TraceError::MissingField { line, field, found }) => {
            assert_eq!((*line, *field, *found), (2, "client id", 4));
        }
        other => panic!("{other:?}"),
    }
    let message = rows[1].as_ref().unwrap_err().to_string();
    assert!(message.starts_with("line 2:"), "{message}");
}

#[test]
fn unknown_operations_are_errors_with_line_numbers() {
    let rows = parse("1,k,3,4,5,get,0\n\n3,k,3,4,5,touch,0\n");
    assert_eq!(rows.len(), 2, "the blank line is skipped");
    match &rows[1] {
        Err(TraceError::UnknownOp { line, op }) => assert_eq!((*line, op.as_str()), (3, "touch")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_numbers_are_errors_with_line_numbers_and_reading_goes_on() {
    let text = "1,k,3,4,5,get,0\n2,k,x3,4,5,get,0\n3,k,3,4,5,set,-1\n4,k,3,99999999999,5,get,0\n5,k,3,4,5,get,0\n";
    let rows = parse(text);
    let bad: Vec<(u64, &str)> = rows
        .iter()
        .filter_map(|r| match r {
            Err(TraceError::BadNumber { line, field, .. }) => Some((*line, *field)),
            _ => None,
        })
        .collect();
    assert_eq!(bad, [(2, "key size"), (3, "TTL"), (4, "value size")]);
    assert_eq!(rows.last().unwrap().as_ref().unwrap().timestamp, 5);
}

#[test]
fn a_header_line_is_skipped_and_line_numbers_still_count_it() {
    let rows = parse(
        "timestamp,anonymized key,key size,value size,client id,operation,TTL\n1,k,3,4,5,nope,0\n",
    );
    match &rows[0] {
        Err(TraceError::UnknownOp { line, .. }) => assert_eq!(*line, 2),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_broken_quote_is_reported_not_swallowed() {
    // An unterminated quote runs to the end of input: the line has too few fields.
    let rows = parse("1,\"open,3,4,5,get,0\n");
    assert!(
        matches!(rows[0], Err(TraceError::MissingField { line: 1, .. })),
        "{rows:?}"
    );
}

fn write_all(path: &Path, records: &[Record]) {
    let mut w = file::create(path).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    assert_eq!(w.finish().unwrap(), records.len() as u64);
}

fn read_all(path: &Path) -> Vec<Record> {
    file::open(path).unwrap().map(Result::unwrap).collect()
}

#[test]
fn zst_round_trip_is_lossless_and_really_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv.zst");
    let records: Vec<Record> = (0..20_000).map(record).collect();
    write_all(&path, &records);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..4], &[0x28, 0xb5, 0x2f, 0xfd], "zstd frame magic");
    assert_eq!(read_all(&path), records);
    // A file compressed elsewhere (one frame per chunk, as `zstd` may write) reads the same.
    let plain = dir.path().join("t.csv");
    write_all(&plain, &records);
    let text = std::fs::read(&plain).unwrap();
    let twice = dir.path().join("two-frames.zst");
    let mut out = std::fs::File::create(&twice).unwrap();
    // Cut anywhere: a frame boundary need not fall on a line boundary.
    let (a, b) = text.split_at(text.len() / 2 + 7);
    out.write_all(&zstd::encode_all(a, 1).unwrap()).unwrap();
    out.write_all(&zstd::encode_all(b, 1).unwrap()).unwrap();
    drop(out);
    assert_eq!(read_all(&twice), records);
}

#[test]
fn parquet_round_trip_is_lossless_across_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    let records: Vec<Record> = (0..50_001).map(record).collect();
    write_all(&path, &records);
    let reader = ParquetReader::open(&path).unwrap();
    assert_eq!(reader.rows(), records.len() as u64);
    assert_eq!(read_all(&path), records);
}

#[test]
fn parquet_row_groups_hold_one_million_rows() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.parquet");
    let n = ROWS_PER_GROUP as u64 + 1000;
    let mut w = file::create(&path).unwrap();
    let mut r = record(0);
    for i in 0..n {
        r.timestamp = i;
        w.write(&r).unwrap();
    }
    w.finish().unwrap();
    let meta = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let groups: Vec<i64> = meta
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows())
        .collect();
    assert_eq!(groups, [ROWS_PER_GROUP as i64, 1000]);
    let codec = meta.metadata().row_group(0).column(0).compression();
    assert!(
        matches!(codec, parquet::basic::Compression::ZSTD(_)),
        "{codec:?}"
    );
}

#[test]
fn convert_goes_csv_to_parquet_to_zst_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("in.csv");
    let records: Vec<Record> = (0..3000).map(record).collect();
    write_all(&csv, &records);
    let parquet = dir.path().join("mid.parquet");
    let zst = dir.path().join("out.zst");
    assert_eq!(convert(&csv, &parquet).unwrap(), 3000);
    assert_eq!(convert(&parquet, &zst).unwrap(), 3000);
    assert_eq!(read_all(&zst), records);
    assert!(matches!(
        convert(&csv, &csv),
        Err(TraceError::InvalidArgument(_))
    ));
}

#[test]
fn convert_stops_at_a_bad_line_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("bad.csv");
    std::fs::write(&csv, "1,k,3,4,5,get,0\n2,k,3,4,5,frobnicate,0\n").unwrap();
    let e = convert(&csv, dir.path().join("o.parquet")).unwrap_err();
    assert!(matches!(e, TraceError::UnknownOp { line: 2, .. }), "{e}");
    let missing = convert(dir.path().join("absent.csv"), dir.path().join("o.csv")).unwrap_err();
    assert!(missing.to_string().contains("absent.csv"), "{missing}");
}
