// bench/report.h — result writers: the terminal table, JSON and CSV.
//
// All writers take the report by const reference and write to a stream or a file; none of them
// measures anything. JSON and CSV carry the full configuration, the machine, the seed and the
// git commit, so a result file alone says how it was produced.
//
// JSON schema "pmhash-bench/2" (one object; /2 adds latency, resize, details, write
// amplification, the workload fields of config, notes and series to /1):
//   schema, started_at, key_generation_seconds,
//   build   {version, git_commit, git_dirty, build_type, compiler}
//   machine {cpu_model, logical_cpus, flush_instruction, simd, kernel, pool_fs,
//            huge_pages (THP modes and the pool tmpfs's huge= option, bench/pages.h),
//            clock_overhead_ns (two steady_clock reads: included in every latency sample)}
//   config  {indexes[], durabilities[], keys, threads[], seed, pool_path, keep_pool, pool_size,
//            pin, huge_pages, media_block_bytes, media_cache_bytes, elimda_logs (only when
//            set: the run's one value), elimda_batch, elimda_writer_logs,
//            smartht_keys_per_head, background_threads (only when set), reference, key_bytes, value_bytes (0: uint64 items), count_keys, check,
//            persist_probe, repeat,
//            experiment, phases[], distribution, mix, ops, warmup_ops, latency_every, table,
//            growth, growth_steps, sample_ops, recovery_keys[]}
//   notes[] strings (skipped parts of a preset, unsupported workloads, the reference used)
//   tables[] {threads, reference: row|null (absl, 1 thread), concurrent_reference: row|null
//             (sharded absl::flat_hash_map, same threads; T > 1, not with
//             variable-size items), rows[]: row,
//             persist_limits[]: probe}
//   row     {index, durability, kind, threads, pool_size, kept_pool, error: string|null,
//            load_factor, dram_bytes,
//            resident_bytes, huge_page_bytes: number|null (after insert: the pool file's, or
//              the reference's array's, resident bytes and those on huge pages),
//            phases[] {name, op, threads, ops, seconds, mops, error,
//                      ratio: number|null (vs concurrent_reference if present, else absl),
//                      ratio_absl: number|null (vs absl, 1 thread),
//                      ratio_min, ratio_max: number|null (lowest and highest per-round ratio
//                        with --repeat; ratio is then the median of the per-round ratios),
//                      samples_mops[]: every round (empty or one element for one run),
//                      latency: {count, sample_every, mean_ns, min_ns, p50_ns, p90_ns, p99_ns,
//                                p999_ns, p9999_ns, max_ns, buckets[[upper_ns, count]...]}|null},
//            stats {size, capacity_slots, load_factor, pm_bytes, dram_bytes, pool_bytes,
//                   global_depth, buckets, splits, doublings, resize_events_logged,
//                   details {NAME: number ...}} | null,
//            resize {count, min_ns, p50_ns, p90_ns, p99_ns, max_ns, total_ns} | null,
//            counting {keys, error, insert: traffic, erase: traffic} | null}
//   traffic {ops, persists, fences, flushed_lines, nt_bytes, media_writes, media_block_bytes,
//            write_amplification} (per operation; write amp = media bytes / 16 B payload, or
//            / key_bytes + value_bytes)
//   probe   {durability, threads, region_bytes, ops, seconds, mops, error}
//   series[] {experiment: "growth"|"recovery", index, durability, error,
//             summary {NAME: number}, points[] {NAME: number}}
//     growth points: inserted, load_factor, capacity_slots, pm_bytes, dram_bytes, resizes,
//       step_insert_mops, {insert,find+,find-,erase}_{mean,p50,p99}_ns; summary: keys,
//       max_load_factor, average_utility, average_load_factor, resize_{count,logged,min,p50,
//       p90,p99,max,total}(_ns)
//     recovery points: keys, build_mops, {crash,clean}_{first_request,open,index_recovery}_ms,
//       {crash,clean}_recovered
//
// CSV: one line per (table, row, phase) with the row's figures repeated on each line, plus one
// line per persist-limit probe (index "persist-limit", kind "probe", phase "persist"); the
// header line names the columns. Series go to a second, long-format CSV (ToSeriesCsv: one line
// per experiment, index, point and metric).
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include "bench/results.h"
#include "pmhash/status.h"

namespace pmhash::bench {

// The lines printed once before the tables: configuration, seed, machine, build.
void WriteBanner(std::ostream& os, const BenchReport& r);
// One table (one thread count): throughput and ratios, then structure and persistence counters.
void WriteTable(std::ostream& os, const BenchReport& r, const TableResult& t);

inline constexpr std::string_view kJsonSchema = "pmhash-bench/2";

// An experiment's curve (growth, recovery): a few lines and its summary.
void WriteSeries(std::ostream& os, const BenchReport& r, const Series& s);

std::string ToJson(const BenchReport& r);
std::string ToSeriesCsv(const BenchReport& r);
std::string ToCsv(const BenchReport& r);
// Write the text to `path` (replacing it). kIOError on failure.
Status WriteFile(const std::string& path, const std::string& text);

}  // namespace pmhash::bench
