// bench/report.h — result writers: the terminal table, JSON and CSV.
//
// All writers take the report by const reference and write to a stream or a file; none of them
// measures anything. JSON and CSV carry the full configuration, the machine, the seed and the
// git commit, so a result file alone says how it was produced.
//
// JSON schema "pmhash-bench/1" (one object):
//   schema, started_at, key_generation_seconds,
//   build   {version, git_commit, git_dirty, build_type, compiler}
//   machine {cpu_model, logical_cpus, flush_instruction, simd, kernel, pool_fs}
//   config  {indexes[], durabilities[], keys, threads[], seed, pool_path, keep_pool, pool_size,
//            pin, reference, count_keys, check, persist_probe, repeat}
//   tables[] {threads, reference: row|null, rows[]: row, persist_limits[]: probe}
//   row     {index, durability, kind, threads, pool_size, kept_pool, error: string|null,
//            load_factor, dram_bytes,
//            phases[] {name, op, threads, ops, seconds, mops, ratio: number|null, error,
//                      samples_mops[]: every repetition (empty or one element for one run)},
//            stats {size, capacity_slots, load_factor, pm_bytes, dram_bytes, pool_bytes,
//                   global_depth, buckets, splits, doublings} | null,
//            counting {keys, error, insert: traffic, erase: traffic} | null}
//   traffic {ops, persists, fences, flushed_lines, nt_bytes, media_writes, media_block_bytes}
//            (per operation)
//   probe   {durability, threads, region_bytes, ops, seconds, mops, error}
//
// CSV: one line per (table, row, phase), with the row's load factor and per-insert traffic
// repeated on each line, plus one line per persist-limit probe (index "persist-limit", kind
// "probe", phase "persist"); the header line names the columns.
#pragma once

#include <ostream>
#include <string>

#include "bench/results.h"
#include "pmhash/status.h"

namespace pmhash::bench {

// The lines printed once before the tables: configuration, seed, machine, build.
void WriteBanner(std::ostream& os, const BenchReport& r);
// One table (one thread count): throughput and ratios, then structure and persistence counters.
void WriteTable(std::ostream& os, const BenchReport& r, const TableResult& t);

std::string ToJson(const BenchReport& r);
std::string ToCsv(const BenchReport& r);
// Write the text to `path` (replacing it). kIOError on failure.
Status WriteFile(const std::string& path, const std::string& text);

}  // namespace pmhash::bench
