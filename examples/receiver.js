// A receiver for relay's batch-completion webhooks: verify, deduplicate, answer fast, work after.
//
//   cd examples && npm install
//   WEBHOOK_SECRET=whsec_... node receiver.js --port 9000
//
// Configuration (environment; the values come from relay's GET /api/v1/webhook-signing):
//   WEBHOOK_SECRET               "secret" (whsec_...): check the v1 (HMAC-SHA256) signature
//   WEBHOOK_PREVIOUS_SECRET      "previous.secret", while a rotation's grace period lasts
//   WEBHOOK_PUBLIC_KEY           "public_key" (whpk_...): check the v1a (Ed25519) signature too
//   WEBHOOK_PREVIOUS_PUBLIC_KEY  "previous.public_key", while a rotation's grace period lasts
// Set a secret, a public key or both; every kind you set must verify.
//
// Catching up (optional): with EVENTS_API_URL (relay's API, e.g. http://127.0.0.1:8000/api/v1)
// and EVENTS_API_KEY (an API key of the account), the receiver keeps the id of the last event
// it processed in a file (--state, default .receiver-last-id) and, when it starts, reads
// GET /events?after=<that id>: whatever completed while it was down is processed first.
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const { parseArgs } = require("node:util");
const { Webhook } = require("standardwebhooks");

const TOLERANCE_S = 5 * 60; // Standard Webhooks: refuse a webhook-timestamp more than 5 min off
const MAX_BODY = 1 << 20; // relay's notifications are ~1 KB; refuse anything absurd
const SEEN_MAX = 100_000; // webhook-ids remembered (oldest forgotten first)
// DER header of an Ed25519 SubjectPublicKeyInfo; the raw 32-byte key follows it.
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

function env(...names) {
  return names.map((name) => (process.env[name] || "").trim()).filter(Boolean);
}

function ed25519Key(whpk) {
  const raw = Buffer.from(whpk.replace(/^whpk_/, ""), "base64");
  if (raw.length !== 32) throw new Error("a whpk_ public key is 32 bytes of base64");
  const der = Buffer.concat([ED25519_SPKI_PREFIX, raw]);
  return crypto.createPublicKey({ key: der, format: "der", type: "spki" });
}

const webhooks = env("WEBHOOK_SECRET", "WEBHOOK_PREVIOUS_SECRET").map((s) => new Webhook(s));
const keys = env("WEBHOOK_PUBLIC_KEY", "WEBHOOK_PREVIOUS_PUBLIC_KEY").map(ed25519Key);

// v1: the standardwebhooks package checks the timestamp and skips the v1a entries it does not know.
function verifyV1(webhook, body, headers) {
  try {
    webhook.verify(body, headers, { jsonParse: false });
    return true;
  } catch {
    return false;
  }
}

// v1a: Ed25519 over `${id}.${timestamp}.` + the exact body bytes.
function verifyV1a(body, headers) {
  const id = headers["webhook-id"] || "";
  const timestamp = headers["webhook-timestamp"] || "";
  if (!id || !/^\d+$/.test(timestamp)) return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_S) return false;
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]);
  for (const entry of (headers["webhook-signature"] || "").split(" ")) {
    const [version, encoded] = entry.split(",");
    if (version !== "v1a" || !encoded) continue;
    const signature = Buffer.from(encoded, "base64");
    if (signature.length !== 64) continue;
    if (keys.some((key) => crypto.verify(null, signed, key, signature))) return true;
  }
  return false;
}

// Every configured kind must have a matching entry.
function verify(body, headers) {
  if (webhooks.length && !webhooks.some((wh) => verifyV1(wh, body, headers))) return false;
  return !keys.length || verifyV1a(body, headers);
}

// In production, deduplicate in your database instead: insert the webhook-id into a table with a
// UNIQUE constraint in the same transaction that records the event (or enqueues the job), and
// treat a unique violation as "already have it". This in-memory set forgets on restart.
const seen = new Set();

function firstTime(id) {
  if (seen.has(id)) return false;
  seen.add(id);
  if (seen.size > SEEN_MAX) seen.delete(seen.values().next().value);
  return true;
}

const state = { path: ".receiver-last-id" };

function lastProcessed() {
  try {
    return fs.readFileSync(state.path, "utf8").trim() || null;
  } catch {
    return null;
  }
}

function remember(id) {
  // Written aside, then renamed: never torn.
  fs.writeFileSync(`${state.path}.tmp`, id);
  fs.renameSync(`${state.path}.tmp`, state.path);
}

// The slow part, run after the answer has gone out (a real app hands it to a job queue).
function processEvent(id, event) {
  const data = event.data;
  // e.g. GET data.results_url with your API key and store the line items.
  console.log(`processed ${id} batch=${data.batch_name} seq=${data.completion_seq}`);
  remember(id);
}

// Every event after the last one processed (GET /events, page by page).
async function catchUp(apiUrl, apiKey) {
  let after = lastProcessed();
  let done = 0;
  for (;;) {
    const query = new URLSearchParams({ limit: "100", ...(after ? { after } : {}) });
    const res = await fetch(`${apiUrl}/events?${query}`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    if (!res.ok) throw new Error(`GET /events: ${res.status} ${await res.text()}`);
    const page = await res.json();
    for (const event of page.events) {
      if (firstTime(event.id)) {
        processEvent(event.id, event);
        done += 1;
      }
    }
    after = page.next_cursor;
    if (!page.has_more) return done;
  }
}

function answer(res, status, text) {
  res.writeHead(status, { "content-type": "text/plain" }).end(text);
}

function handle(req, res, body) {
  if (!verify(body, req.headers)) {
    console.log("rejected: invalid signature"); // never act on an unverified body
    return answer(res, 400, "invalid signature");
  }
  const id = req.headers["webhook-id"];
  const event = JSON.parse(body.toString("utf8"));
  if (event.type === "webhook.verify") {
    // Endpoint verification (registered with "verify": true): echo the challenge.
    console.log(`verified ${event.data.url}`);
    return answer(res, 200, event.data.challenge);
  }
  if (event.type !== "batch.completed") {
    console.log(`received ${event.type} ${id}`); // webhook.test, or a type added later
    return answer(res, 200, "ok");
  }
  if (!firstTime(id)) {
    console.log(`duplicate ${id}`); // a retry of a delivery we already have: just acknowledge it
    return answer(res, 200, "duplicate");
  }
  answer(res, 200, "ok"); // answer at once, then work
  setImmediate(() => processEvent(id, event));
}

const server = http.createServer((req, res) => {
  if (req.method !== "POST" || req.url !== "/hook") return answer(res, 404, "not found");
  const chunks = [];
  let size = 0;
  req.on("data", (chunk) => {
    size += chunk.length;
    if (size > MAX_BODY) {
      answer(res, 413, "body too large");
      req.destroy();
    } else {
      chunks.push(chunk);
    }
  });
  req.on("end", () => size <= MAX_BODY && handle(req, res, Buffer.concat(chunks)));
});

const { values } = parseArgs({
  options: {
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "9000" },
    state: { type: "string", default: state.path },
  },
});
state.path = values.state;
if (!webhooks.length && !keys.length) {
  console.error("set WEBHOOK_SECRET (whsec_...) and/or WEBHOOK_PUBLIC_KEY (whpk_...)");
  process.exit(2);
}
async function main() {
  const [apiUrl] = env("EVENTS_API_URL");
  const [apiKey] = env("EVENTS_API_KEY");
  if (apiUrl && apiKey) console.log(`caught up: ${await catchUp(apiUrl, apiKey)} event(s)`);
  server.listen(Number(values.port), values.host, () => {
    console.log(
      `listening on http://${values.host}:${values.port}/hook ` +
        `(v1 secrets: ${webhooks.length}, v1a keys: ${keys.length})`,
    );
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
