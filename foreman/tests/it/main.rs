//! Integration tests: the real `saheeli` binary, a real Docker daemon, real
//! containers and real SQLite files. The only double is `fake_llm`, a local
//! server speaking the OpenAI wire format.

mod fake_cache;
mod fake_llm;
mod fake_stream;
mod util;

mod admission;
mod agents;
mod blocked;
mod capabilities;
mod chaos;
mod chaos_gateway;
mod cli;
mod daemon;
mod doctor;
mod doors;
mod dryrun;
mod ending_wins;
mod eval;
mod eval_browser;
mod eval_example;
mod event_pages;
mod fencing;
mod gateway;
mod gateway_attack;
mod gateway_guard;
mod gateway_native;
mod hardening;
mod hostile_collect;
mod hostile_files;
mod human;
mod input;
mod lifecycle;
mod long_tasks;
mod metrics;
mod openai;
mod output;
mod privsep;
mod replay;
mod report;
mod safety;
mod sandbox;
mod steps;
mod swarm;
mod swarm_park;
mod swarm_verify;
mod templates;
mod verify;
mod verify_fresh;
mod web;
mod web_browser;
mod webhooks;
mod workspace_packing;
