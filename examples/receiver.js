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
// GET /events?after=<that id>: whatever completed while it was down is processed, in order,
// each once. The catch-up runs in the background: webhooks are served from the start, and both
// paths deduplicate on the id. EVENTS_RETRY_MAX_S (default 30) is the longest wait between
// catch-up attempts.
// - relay unreachable, a 5xx or a 429: tried again, waiting 0.5 s, 1 s, 2 s, ... up to
//   EVENTS_RETRY_MAX_S, until it answers.
// - a 404 for the saved id (relay does not know it: an event appended a moment after its webhook
//   went out, or an id of another deployment or account): asked again a few times within about
//   3 s; then the catch-up stops with a message and the file keeps that id. The receiver does
//   not start over from the oldest event kept: that would process every kept event again. (An
//   id that aged out of the feed is not a 404: relay reads from the oldest kept.)
// - any other 4xx (a wrong key, a malformed id): the catch-up stops with a message.
// Until the catch-up has read the whole feed, webhooks are processed but do not move the saved
// id, so a restart meanwhile resumes from where the feed was read, not past a gap.
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const { parseArgs } = require("node:util");
const { Webhook } = require("standardwebhooks");

const TOLERANCE_S = 5 * 60; // Standard Webhooks: refuse a webhook-timestamp more than 5 min off
const MAX_BODY = 1 << 20; // relay's notifications are ~1 KB; refuse anything absurd
const SEEN_MAX = 100_000; // webhook-ids remembered (oldest forgotten first)
const RETRY_FIRST_S = 0.5; // the first wait after relay's API failed to answer the catch-up
const RETRY_MAX_S = 30; // the longest (EVENTS_RETRY_MAX_S)
const NOT_FOUND_WAITS_S = [0.1, 0.2, 0.4, 0.8, 1.5]; // asking again about a saved id relay 404s
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

// followsWebhooks is false while a catch-up is pending: the saved id then moves with the feed
// only, never past an event the catch-up has not read yet.
const state = { path: ".receiver-last-id", followsWebhooks: true };

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
}

class Stop extends Error {} // the catch-up cannot go on by itself (retrying would not help)
class NotFound extends Error {} // relay has no event with the saved id

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

// One page of GET /events after `after`, or (a string) why relay could not answer one now.
async function readPage(apiUrl, apiKey, after) {
  const query = new URLSearchParams({ limit: "100", ...(after ? { after } : {}) });
  let res;
  try {
    res = await fetch(`${apiUrl}/events?${query}`, {
      headers: { authorization: `Bearer ${apiKey}` },
      signal: AbortSignal.timeout(30_000),
    });
  } catch (err) {
    return `relay's API is unreachable (${err.cause?.code || err.name}: ${err.message})`;
  }
  const text = await res.text().catch(() => "");
  if (res.status >= 500 || res.status === 429) return `GET /events answered ${res.status}`;
  if (res.status === 404 && after) throw new NotFound(after);
  if (res.status >= 400) throw new Stop(`GET /events answered ${res.status} ${text.slice(0, 300)}`);
  try {
    const page = JSON.parse(text);
    if (Array.isArray(page.events) && typeof page.has_more === "boolean") return page;
  } catch {}
  return `GET /events answered ${res.status} without an event page`; // e.g. a proxy's page
}

// Every event after the last one processed (GET /events, page by page), trying again while
// relay is unreachable or failing; webhooks are served meanwhile.
async function catchUp(apiUrl, apiKey, retryMaxS) {
  let after = lastProcessed();
  let done = 0;
  let wait = RETRY_FIRST_S;
  let notFound = 0;
  for (;;) {
    let page;
    try {
      page = await readPage(apiUrl, apiKey, after);
    } catch (err) {
      if (err instanceof NotFound && notFound < NOT_FOUND_WAITS_S.length) {
        await sleep(NOT_FOUND_WAITS_S[notFound]); // it may be appended in a moment
        notFound += 1;
        continue;
      }
      if (err instanceof NotFound) {
        console.log(
          `catch-up stopped: relay has no event ${after} (saved in ${state.path}; from another ` +
            "deployment or account?). Webhooks are still processed. To catch up, put a known " +
            "event id in that file, or delete it to process every event relay keeps (again).",
        );
        return;
      }
      if (err instanceof Stop) {
        console.log(`catch-up stopped: ${err.message}`);
        return;
      }
      throw err;
    }
    if (typeof page === "string") {
      const pause = wait * (0.8 + 0.2 * Math.random()); // jittered: receivers restarted together
      console.log(`catch-up: ${page}; trying again in ${pause.toFixed(1)}s`);
      await sleep(pause);
      wait = Math.min(wait * 2, retryMaxS);
      continue;
    }
    wait = RETRY_FIRST_S;
    notFound = 0;
    for (const event of page.events) {
      if (firstTime(event.id)) {
        processEvent(event.id, event);
        done += 1;
      }
      remember(event.id); // every event up to here is processed, here or by a webhook
    }
    after = page.next_cursor || after;
    if (!page.has_more) {
      state.followsWebhooks = true;
      console.log(`caught up: ${done} event(s)`);
      return;
    }
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
  setImmediate(() => {
    processEvent(id, event);
    if (state.followsWebhooks) remember(id);
  });
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
const retryMaxS = Number((process.env.EVENTS_RETRY_MAX_S || "").trim() || RETRY_MAX_S);
if (!Number.isFinite(retryMaxS)) {
  console.error("EVENTS_RETRY_MAX_S must be a number of seconds");
  process.exit(2);
}
const [apiUrl] = env("EVENTS_API_URL");
const [apiKey] = env("EVENTS_API_KEY");
if (apiUrl && apiKey) state.followsWebhooks = false; // before the first webhook can arrive
server.listen(Number(values.port), values.host, () => {
  console.log(
    `listening on http://${values.host}:${values.port}/hook ` +
      `(v1 secrets: ${webhooks.length}, v1a keys: ${keys.length})`,
  );
  if (apiUrl && apiKey) {
    catchUp(apiUrl, apiKey, Math.max(retryMaxS, 0.1)).catch((err) => {
      console.error("catch-up failed:", err); // a bug, or the state file could not be written
    });
  }
});
