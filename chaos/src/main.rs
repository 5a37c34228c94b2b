//! # oncekey-chaos
//!
//! Many intended submissions pushed through every fault at once (lost replies, failures before
//! the work, delays that cause 409s, crashes before commit, killed clients, a killed server),
//! then the guarantees checked against the server's database and the clients' stores (see
//! [`check`]). The last line is `guarantee violations 0`, or the run exits non-zero with the
//! violating submissions listed. `--break` plants one known mistake in the workers to show that
//! the checks catch it.

mod check;
mod conductor;
mod plan;
mod worker;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};

/// Chaos runs against the oncekey reference server: every fault at once, then nothing may be
/// counted twice or lost.
#[derive(Debug, Parser)]
#[command(
    name = "oncekey-chaos",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: conductor::RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One worker process (started by the conductor).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Worker(args)) => match worker::main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worker: {e}");
                ExitCode::from(3)
            }
        },
        None => conduct(&cli.run),
    }
}

fn conduct(args: &conductor::RunArgs) -> ExitCode {
    if !(0.0..=1.0).contains(&args.fault_rate) {
        eprintln!("oncekey-chaos: --fault-rate must be between 0 and 1");
        return ExitCode::from(2);
    }
    let started = Instant::now();
    let mut totals = conductor::Totals::default();
    for run in 0..args.runs {
        if let Err(e) = conductor::run(args, run, &mut totals) {
            eprintln!("oncekey-chaos: {e}");
            return ExitCode::from(2);
        }
    }
    print_table(args, &totals, started.elapsed().as_secs_f64());
    if totals.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn join(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "-".to_owned();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_table(args: &conductor::RunArgs, t: &conductor::Totals, secs: f64) {
    let row = |label: &str, value: String| println!("{label:<28} {value}");
    println!(
        "oncekey chaos: seed {}, fault rate {} (from the {}), {} workers x {} at once, {}{}",
        args.seed,
        args.fault_rate,
        match args.faults_from {
            conductor::FaultsFrom::Server => "server",
            conductor::FaultsFrom::Client => "workers",
        },
        args.workers,
        args.concurrency,
        if args.db.is_some() {
            "PostgreSQL (server and stores)"
        } else {
            "SQLite files"
        },
        match args.mistake {
            Some(m) => format!(", --break {m}"),
            None => String::new(),
        }
    );
    row("runs", t.runs.to_string());
    row(
        "seeded plan",
        format!(
            "{} (submissions, kill points, fault seeds; equal seeds, equal digests)",
            &plan::sha256_hex(t.plan.as_bytes())[..16]
        ),
    );
    row(
        "submissions",
        format!(
            "{} ({} valid, {} invalid)",
            t.submissions,
            t.submissions - t.invalid,
            t.invalid
        ),
    );
    let sent: u64 = t.attempts.values().sum();
    row(
        "requests by status",
        format!("{sent} attempts: {}", join(&t.attempts)),
    );
    row("outcomes", join(&t.outcomes));
    row(
        "answers checked",
        format!(
            "{} against the stored receipts, {} of them replays",
            t.compared, t.replayed
        ),
    );
    row("tickets", t.tickets.to_string());
    row(
        "callers that gave up",
        format!("{} sends dropped mid-way, then made again", t.gave_up),
    );
    if args.mistake.is_some() {
        row("discards (--break)", t.discards.to_string());
    }
    row(
        "faults injected",
        format!(
            "{} (server counters, polled)",
            t.server.get("faults").copied().unwrap_or(0)
        ),
    );
    if !t.asked_faults.is_empty() {
        row(
            "faults asked by workers",
            format!(
                "{}: {} (X-Fault; only the attempt that does the work suffers one)",
                t.asked_faults.values().sum::<u64>(),
                join(&t.asked_faults)
            ),
        );
    }
    let server: BTreeMap<String, u64> = t
        .server
        .iter()
        .filter(|(k, _)| k.as_str() != "faults")
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    row("server counters", join(&server));
    row(
        "restarts",
        format!(
            "server {} ({} killed, {} to turn faults off), workers {} killed{}",
            t.server_restarts,
            t.server_kills,
            t.server_restarts - t.server_kills,
            t.worker_kills,
            if t.worker_crashes > 0 {
                format!(", {} exited with an error", t.worker_crashes)
            } else {
                String::new()
            }
        ),
    );
    row("time", format!("{secs:.1} s"));
    if !t.violations.is_empty() {
        let mut by: BTreeMap<u8, u64> = BTreeMap::new();
        for (_, v) in &t.violations {
            *by.entry(v.guarantee).or_default() += 1;
        }
        println!();
        println!("violating submissions:");
        for (run, v) in t.violations.iter().take(100) {
            println!("  run {run} ({}) {}: {}", v.guarantee, v.what, v.why);
        }
        if t.violations.len() > 100 {
            println!("  ... and {} more", t.violations.len() - 100);
        }
        let per: Vec<String> = by.iter().map(|(g, n)| format!("({g}) {n}")).collect();
        row("violations by guarantee", per.join(", "));
    }
    println!("guarantee violations {}", t.violations.len());
}
