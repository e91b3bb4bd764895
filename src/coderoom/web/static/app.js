// The coderoom page. Everything it shows came from a run record or a sandbox and is hostile:
// text goes into the DOM with textContent only, links and image sources are built here from
// this server's own API paths, and the one HTML inserted is the server's sanitised rendering of
// Markdown (insertSanitised). The CSP allows no inline script, so even that could run nothing.
//
// The token comes in the URL's fragment (#token=..., never sent to a server), is kept in
// sessionStorage (this tab only) and leaves the address bar at once. It goes to the server only
// as an Authorization header: API calls, the event stream (fetch, not EventSource, which cannot
// send headers), images and downloads (fetched, then shown or saved from a blob: URL). No
// credential is in a cookie or in any URL. A #token= pasted into an open tab (hashchange) or into
// the token field replaces it; the page then starts again with it.
"use strict";

const TOKEN_KEY = "coderoom_token";
const SSE_RETRY_MS = 2000;  // before the event stream is asked for again after it broke
const state = {
  config: null, view: null, source: null, files: new Set(), previewSeq: 0, token: null,
  cells: new Map(), results: [], placed: new Set(), lastMessage: null, answered: null, turns: new Map(),  // the transcript's parts
  activity: null,  // what a live session is doing now: { label, since, askSince }, shown with a clock
  streaming: null,  // the reply arriving now (model_stream events): { box, count, text, tokens }, gone at its model_call
};
const STREAM_SHOWN_CHARS = 20_000;  // of a streaming reply's text on the page (the final reply replaces it)
const TICK_MS = 1000;  // the clock of "waiting for the model" moves every second
const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

const TOKEN_FORM = /^[A-Za-z0-9_-]{8,200}$/;

// The token in a URL's fragment (#token=...) or given alone; null when it is neither.
function tokenIn(text) {
  const hash = text.indexOf("#");
  const given = hash >= 0 ? new URLSearchParams(text.slice(hash + 1)).get("token") : text.trim();
  return given && TOKEN_FORM.test(given) ? given : null;
}

// The fragment's token into this tab's storage, the fragment out of the address bar; true when it changed.
function takeToken() {
  const given = tokenIn(location.hash);
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  if (!given || given === sessionStorage.getItem(TOKEN_KEY)) return false;
  sessionStorage.setItem(TOKEN_KEY, given);
  return true;
}

function askForToken(message) {
  for (const part of document.querySelectorAll("main, nav")) part.hidden = true;
  showError(message);
  $("token-form").hidden = false;
}

function useToken(event) {
  event.preventDefault();
  const given = tokenIn($("token-input").value);
  if (!given) { showError("that is not a token: paste the URL coderoom serve printed (it holds #token=...)"); return; }
  sessionStorage.setItem(TOKEN_KEY, given);
  location.reload();  // the page starts again with it, as from the printed URL
}

async function authedFetch(path, options = {}) {
  const headers = Object.assign({}, options.headers || {}, { Authorization: `Bearer ${state.token}` });
  if (options.method && options.method !== "GET") headers["X-Coderoom-CSRF"] = state.config ? state.config.csrf : "";
  return fetch(path, Object.assign({}, options, { headers, credentials: "omit" }));
}

async function api(path, options = {}) {
  const response = await authedFetch(path, options);
  const body = response.headers.get("content-type")?.includes("json") ? await response.json() : await response.text();
  if (!response.ok) {
    const error = new Error((body && body.error) || String(body) || response.statusText);
    error.status = response.status;
    throw error;
  }
  return body;
}

function show(section) {
  for (const id of ["new", "runs", "session"]) $(id).hidden = id !== section;
  showError("");
}

// --- the view of one session (live) or one past run (read-only) ---

function base() {
  const v = state.view;
  return v.kind === "session" ? `/api/sessions/${encodeURIComponent(v.id)}` : `/api/runs/${encodeURIComponent(v.name)}`;
}

function fileUrl(kind, path) {
  return `${base()}/${kind}?path=${encodeURIComponent(path)}`;
}

async function blobUrl(path) {
  const response = await authedFetch(path);
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  return URL.createObjectURL(await response.blob());
}

function showImage(img, path) {
  blobUrl(path).then((url) => { img.src = url; }, (error) => showError(`image: ${error.message}`));
}

// A download: fetched with the header, saved from a blob: URL under the server's safe name.
async function download(path, name) {
  try {
    const url = await blobUrl(path);
    const link = el("a");
    link.href = url;
    link.download = name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  } catch (error) { showError(`download: ${error.message}`); }
}

// A sandbox's name as shown: controls, bidi and zero-width characters as escapes (the server's
// listing and events come in this form already; this is for a path the page holds raw).
function shownName(path) {
  return path.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function downloadName(path) {
  return path.split("/").pop().replace(/[^A-Za-z0-9._-]/g, "_") || "download";
}

function openView(view, title) {
  if (state.source) { state.source.close(); state.source = null; }
  state.view = view;
  Object.assign(state, { files: new Set(), cells: new Map(), results: [], placed: new Set(), lastMessage: null, answered: null, turns: new Map(), streaming: null });
  idle();
  show("session");
  $("session-title").textContent = title;
  $("transcript").replaceChildren();
  $("file-list").replaceChildren();
  $("preview").replaceChildren();
  const zipName = `${(view.name || "session").replace(/[^A-Za-z0-9._-]/g, "_")}.zip`;
  $("zip").onclick = (event) => { event.preventDefault(); download(`${base()}/zip`, zipName); };
  $("notebook").hidden = view.kind !== "run";
  $("notebook").onclick = () => download(`${base()}/notebook`, `${(view.name || "run").replace(/[^A-Za-z0-9._-]/g, "_")}.ipynb`);
  $("model-shown").textContent = "";
  $("ask-form").hidden = view.kind !== "session";
  setStatus(view.kind === "session" ? "starting" : "past run (read-only)");
}

function setStatus(text) { if ($("status").textContent !== text) $("status").textContent = text; }

// --- what a live session is doing: a label in the status (announced when it changes) and a
// clock beside it (not announced: it moves every second), the Stop button while it works ---

function seconds(ms) { return `${Math.floor(ms / 1000)} s`; }

function tick() {
  const activity = state.activity;
  if (!activity) return;
  const now = Date.now();
  const total = activity.askSince === activity.since ? "" : ` (this answer: ${seconds(now - activity.askSince)})`;
  $("elapsed").textContent = `${seconds(now - activity.since)}${total}`;
}

function working(label, newAsk = false) {
  if (!state.view || state.view.kind !== "session") return;  // a past run replays, it does not work
  const now = Date.now();
  if (!state.activity) state.activity = { timer: setInterval(tick, TICK_MS), askSince: now };
  if (newAsk) state.activity.askSince = now;
  if (state.activity.label !== label || newAsk) Object.assign(state.activity, { label, since: now });
  setStatus(label);
  $("stop").hidden = false;
  tick();
}

function idle(text) {
  if (state.activity) clearInterval(state.activity.timer);
  state.activity = null;
  $("elapsed").textContent = "";
  $("stop").hidden = true;
  $("stop").disabled = false;
  if (text) setStatus(text);
}

function answerClass(status) {
  return status === "ok" ? "status-ok" : status === "stopped" ? "status-stopped" : "status-bad";
}

// One model reply's cost, on its turn's line: how long it took and the tokens it read and wrote.
function usageText(ev) {
  const usage = ev.usage || {};
  const parts = [];
  if (typeof ev.duration_s === "number" && ev.duration_s > 0) parts.push(`${ev.duration_s.toFixed(1)} s`);
  if (usage.input_tokens || usage.output_tokens) parts.push(`${usage.input_tokens || 0} tokens in, ${usage.output_tokens || 0} out`);
  return parts.join(" · ");
}

// --- a small syntax highlighter ---
// (Here, not in a module of its own: the guard serves only app.js and app.css without the token.)
// A small syntax highlighter for the code cells (Python and shell): it splits code into tokens and
// returns text nodes and <span class="tok-..."> elements built with textContent, so the code, which
// a model or a forged record wrote, is never parsed as HTML. It colours; it does not check syntax.

const HIGHLIGHT_MAX_CHARS = 60_000;  // past this a cell is shown plain: colour is not worth the time
const PY_KEYWORDS = new Set(("False None True and as assert async await break class continue def del elif else except " +
  "finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case").split(" "));
const PY_BUILTINS = new Set("print len range open str int float list dict set tuple sorted sum min max enumerate zip isinstance type super self".split(" "));
const SH_KEYWORDS = new Set("if then else elif fi for while do done case esac in function return export local cd echo set".split(" "));

const GRAMMARS = {
  python: [
    ["comment", /#[^\n]*/y],
    ["string", /[rRbBfFuU]{0,2}("""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?)/y],
    ["number", /\b(?:0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?j?|\.\d+)\b/y],
    ["word", /[A-Za-z_][A-Za-z0-9_]*/y],
  ],
  shell: [
    ["comment", /(?<![^\s;|&(])#[^\n]*/y],
    ["string", /"(?:[^"\\]|\\.)*"?|'[^']*'?/y],
    ["variable", /\$(?:\{[^}\n]*\}?|[A-Za-z_][A-Za-z0-9_]*|[0-9?#@*$!-])/y],
    ["number", /\b\d+\b/y],
    ["word", /[A-Za-z_][A-Za-z0-9_.-]*/y],
  ],
};

function wordClass(language, word) {
  if (language === "python") {
    if (PY_KEYWORDS.has(word)) return "keyword";
    if (PY_BUILTINS.has(word)) return "builtin";
  } else if (SH_KEYWORDS.has(word)) return "keyword";
  return null;
}

// `code` as nodes to append to a <code> element: plain text and coloured spans.
function highlighted(code, language) {
  const grammar = GRAMMARS[language];
  if (!grammar || code.length > HIGHLIGHT_MAX_CHARS) return [document.createTextNode(code)];
  const nodes = [];
  let plain = "";
  const flush = () => { if (plain) { nodes.push(document.createTextNode(plain)); plain = ""; } };
  let at = 0;
  outer: while (at < code.length) {
    for (const [kind, pattern] of grammar) {
      pattern.lastIndex = at;
      const match = pattern.exec(code);
      if (!match || match[0] === "") continue;
      const text = match[0];
      const cls = kind === "word" ? wordClass(language, text) : kind;
      if (cls) {
        flush();
        const span = document.createElement("span");
        span.className = `tok-${cls}`;
        span.textContent = text;
        nodes.push(span);
      } else plain += text;
      at += text.length;
      continue outer;
    }
    plain += code[at];
    at += 1;
  }
  flush();
  return nodes;
}

// --- the transcript ---

const LONG_CELL_LINES = 14;  // a cell with more lines starts collapsed
const PROTOCOL_LINE = /^CODEROOM_[A-Z_]+(?: |$)/;  // coderoom's own lines for its analyst, not for people
const IMAGE_FILE = /\.(png|jpe?g|gif|webp)$/i;

function codeOf(args) {
  if (args && typeof args === "object") {
    if (typeof args.code === "string") return { text: args.code, language: "python" };
    if (typeof args.cmd === "string") return { text: args.cmd, language: "shell" };
    if (typeof args.chars === "string") return { text: args.chars, language: "shell" };
    return { text: JSON.stringify(args, null, 1), language: "" };
  }
  return { text: String(args ?? ""), language: "" };
}

function button(text, className, label) {
  const node = el("button", className, text);
  node.type = "button";
  if (label) node.setAttribute("aria-label", label);
  return node;
}

// Code as a highlighted block with a copy button, collapsed (and expandable) when long.
function codeBlock(text, language) {
  const wrap = el("div", "code-block");
  const pre = el("pre", "code");
  const code = el("code");
  code.append(...highlighted(text, language));
  pre.append(code);
  const tools = el("div", "code-tools");
  const copy = button("Copy", "small", "Copy the code");
  copy.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(text); copy.textContent = "Copied"; } catch { copy.textContent = "Copy failed"; }
    setTimeout(() => { copy.textContent = "Copy"; }, 1500);
  });
  tools.append(copy);
  const lines = text.split("\n").length;
  if (lines > LONG_CELL_LINES) {
    pre.classList.add("collapsed");
    const toggle = button(`Show all ${lines} lines`, "small");
    toggle.setAttribute("aria-expanded", "false");
    toggle.addEventListener("click", () => {
      const open = pre.classList.toggle("collapsed") === false;
      toggle.setAttribute("aria-expanded", String(open));
      toggle.textContent = open ? "Collapse" : `Show all ${lines} lines`;
    });
    tools.append(toggle);
  }
  wrap.append(pre, tools);
  return wrap;
}

// Text output with coderoom's protocol lines moved into a closed "details" toggle.
function outputBlock(text, className) {
  const shown = [];
  const protocol = [];
  for (const line of text.replace(/\n$/, "").split("\n")) (PROTOCOL_LINE.test(line) ? protocol : shown).push(line);
  const parts = [];
  if (shown.join("").trim()) parts.push(el("pre", className, shown.join("\n")));
  if (protocol.length) {
    const details = el("details", "protocol");
    details.append(el("summary", null, `coderoom protocol (${protocol.length} line${protocol.length > 1 ? "s" : ""})`), el("pre", "result protocol-lines", protocol.join("\n")));
    parts.push(details);
  }
  return parts;
}

function markdownBlock(className, html, text) {
  const box = el("div", `${className} markdown-text`);
  if (typeof html === "string") insertSanitised(box, html); else box.textContent = text;
  return box;
}

// The result of one tool call: streams as text, the value, the error as one highlighted block.
function resultParts(ev) {
  const parts = [];
  const limited = /\[coderoom: [^\]]*limit/i.test(ev.output || "");
  const resultClass = limited ? "result limit" : "result";
  if (ev.cell) {
    const cell = ev.cell;
    if (cell.stdout) parts.push(...outputBlock(cell.stdout, resultClass));
    if (cell.stderr) parts.push(...outputBlock(cell.stderr, `${resultClass} stderr`));
    if (cell.table) parts.push(valueTable(cell.table));
    else if (cell.value !== null && cell.value !== undefined) parts.push(el("pre", `${resultClass} value`, cell.value));
    for (const note of cell.notes || []) parts.push(el("p", "note", note));
    if (cell.error) parts.push(el("pre", "error-block", cell.error));
    else if (!parts.length) parts.push(el("pre", `${resultClass} empty`, ev.output || "(no output)"));
  } else if (ev.shell) {
    const failed = ev.shell.exit_code !== null && ev.shell.exit_code !== undefined && ev.shell.exit_code !== 0;
    const text = ev.shell.output || "";
    if (failed) parts.push(el("pre", `error-block ${resultClass}`, text || `exit code ${ev.shell.exit_code}`));
    else parts.push(...(text.trim() ? outputBlock(text, resultClass) : [el("pre", `${resultClass} empty`, "(no output)")]));
  } else {
    parts.push(...outputBlock(ev.output || "", resultClass));
  }
  return parts;
}

// A DataFrame or Series value as a table (the kernel's first rows and columns, every cell text),
// in a box that scrolls sideways, captioned with the true shape and what part of it is shown.
function valueTable(table) {
  const count = (n, one) => `${Number(n).toLocaleString("en")} ${one}${n === 1 ? "" : "s"}`;
  const shownRows = table.data.length, shownColumns = table.header.length;
  const all = shownRows === table.rows && shownColumns === table.columns;
  const box = el("table", "value-table");
  box.createCaption().textContent = `${count(table.rows, "row")} x ${count(table.columns, "column")} `
    + (all ? "(showing all)" : `(showing the first ${count(shownRows, "row")} x ${count(shownColumns, "column")})`);
  const head = el("tr");
  const corner = el("th");
  corner.append(el("span", "visually-hidden", "index"));
  head.append(corner);
  for (const name of table.header) head.append(el("th", null, name));
  box.createTHead().append(head);
  const body = box.createTBody();
  table.data.forEach((values, at) => {
    const tr = el("tr");
    const label = el("th", null, table.index[at]);
    label.scope = "row";
    tr.append(label);
    for (const value of values) tr.append(el("td", null, value));
    body.append(tr);
  });
  const scroller = el("div", "table-scroll value-scroll");
  scroller.tabIndex = 0;  // a scrolling region is reachable by keyboard
  scroller.setAttribute("role", "region");
  scroller.setAttribute("aria-label", `${table.kind} value`);
  scroller.append(box);
  return scroller;
}

function resultTitle(ev) {
  if (ev.cell) return `cell ${ev.cell.number} · ${ev.cell.status}${ev.cell.duration_s != null ? ` · ${ev.cell.duration_s.toFixed(2)} s` : ""}`;
  if (ev.shell) return `${ev.shell.status}${ev.shell.exit_code != null ? ` · exit ${ev.shell.exit_code}` : ""}`;
  return "result";
}

function figure(path) {
  const box = el("figure", "figure");
  const img = el("img", "figure");
  img.alt = `figure ${shownName(path)}`;
  img.dataset.path = path;
  showImage(img, fileUrl("file", path) + "&inline=1");
  box.append(img, el("figcaption", "note", shownName(path)));
  state.placed.add(path);
  return box;
}

// A new cell for a tool call: its header and its code; the result goes into it when it comes.
function newCell(ev) {
  const box = el("div", "event event-tool_start cell");
  const head = el("div", "cell-head");
  head.append(el("span", "tool-name", `${ev.name}${ev.origin === "client" ? " (from the page)" : ""}`));
  box.append(head);
  const { text, language } = codeOf(ev.arguments);
  box.append(codeBlock(text, language));
  state.cells.set(ev.call_id, box);
  return box;
}

function renderResult(ev) {
  const box = el("div", `event event-tool_result${ev.cell && ev.cell.status !== "ok" ? " failed" : ""}`);
  box.append(el("h4", "result-head", `${ev.name} result · ${resultTitle(ev)}`));
  box.append(...resultParts(ev));
  for (const pre of box.querySelectorAll("pre")) pre.tabIndex = 0;  // output may scroll: a keyboard must reach it
  for (const path of (ev.cell && ev.cell.figures) || []) if (!state.placed.has(path)) box.append(figure(path));
  state.results.push({ box, text: `${(ev.cell && ev.cell.stdout) || ""}\n${(ev.shell && ev.shell.output) || ""}\n${ev.output || ""}` });
  const cell = state.cells.get(ev.call_id);
  if (cell && !cell.querySelector(".event-tool_result")) { cell.append(box); return null; }
  return box;
}

// Images the listing has that no cell showed yet go to the first cell whose output names them
// (a plot saved with savefig is announced in the output of the cell that wrote it).
function placeFigures(paths) {
  for (const path of paths) {
    if (state.placed.has(path) || !IMAGE_FILE.test(path)) continue;
    const maker = state.results.find((r) => r.text.includes(path));
    if (maker) maker.box.append(figure(path));
  }
}

// The answer, once: the model's last message when it is the answer joins the answer block.
function answerBlock(box, ev) {
  if (!ev.final_output || ev.final_output === state.answered) return;
  const last = state.lastMessage;
  if (last && last.text === ev.final_output) {
    const turn = last.node.closest(".event");
    last.node.remove();
    if (turn && !turn.querySelector(".message")) turn.remove();
  }
  state.lastMessage = null;
  state.answered = ev.final_output;
  box.append(markdownBlock("message final", ev.final_html, ev.final_output));
}

function renderEvent(ev) {
  const box = el("div", `event event-${String(ev.type).replace(/[^a-z_]/g, "")}`);
  const title = (text) => box.append(el("h4", null, text));
  switch (ev.type) {
    case "run_start":
      title(`Run started · model ${ev.model}`);
      $("model-shown").textContent = `model: ${ev.model}`;
      if (ev.notice) box.append(el("p", "note", ev.notice));
      break;
    case "session_open":
      title(`Session open${ev.pooled ? " (warm sandbox)" : ""}`);
      if (ev.files && ev.files.length) box.append(el("p", "note", `files: ${ev.files.join(", ")}`));
      break;
    case "ask_start":
      title("Request");
      box.append(el("div", "message request", ev.request));
      state.answered = null;
      working("waiting for the model", true);
      break;
    case "model_start": {
      const turn = el("span", "turn", `Turn ${ev.turn}`);
      state.turns.set(ev.turn, turn);
      box.append(turn);
      working(`waiting for the model (turn ${ev.turn})`);
      break;
    }
    case "model_stream":
      streamed(ev);
      return null;
    case "egress":
      return egressRow(ev);
    case "model_call": {
      endStream();
      const usage = usageText(ev);
      const turn = state.turns.get(ev.turn);
      if (usage && turn && !turn.querySelector(".usage")) turn.append(el("span", "usage", ` · ${usage}`));
      for (const item of ev.output || []) {
        if (item.kind !== "message" || !item.text) continue;
        const node = markdownBlock("message", item.html, item.text);
        box.append(node);
        state.lastMessage = { node, text: item.text };
      }
      if (!box.querySelector(".message")) return null;
      break;
    }
    case "tool_start":
      working(`running ${ev.name}`);
      return newCell(ev);
    case "tool_result":
      working("waiting for the model");
      refreshFiles();
      return renderResult(ev);
    case "file_written":
      title(`file written: ${ev.path} (${ev.size} bytes)`);
      refreshFiles();
      break;
    case "nudge":
      title("coderoom asked for missing outputs");
      box.append(el("p", null, (ev.missing || []).map((m) => `${m.path}: ${m.reason}`).join("; ")));
      break;
    case "model_retry":
      title(`model server failed (attempt ${ev.attempt} of ${ev.max_retries}): ${ev.reason}`);
      break;
    case "extract_refused":
      title("a file was refused");
      box.append(el("p", "error", ev.detail));
      break;
    case "file_read":
    case "files_listed":
      return null;  // the page's own listings and previews: the record keeps them, the transcript need not
    case "events_lost":
      title(`${ev.count} events not shown (the page fell behind; the record has them)`);
      break;
    case "ask_end":
      endStream();  // a stopped or failed answer ends the reply that was arriving
      title(`Answer · ${ev.status}`);
      box.classList.add(answerClass(ev.status));
      answerBlock(box, ev);
      if (ev.error) box.append(el("pre", ev.status === "stopped" ? "note" : "error-block", ev.error));
      idle(`ready (last answer: ${ev.status})`);
      refreshFiles();
      break;
    case "run_end":
      endStream();
      title(`Run ended · ${ev.status}`);
      box.classList.add(answerClass(ev.status));
      idle();
      answerBlock(box, ev);
      if (ev.error) box.append(el("pre", "error-block", ev.error));
      for (const limit of ev.limits_hit || []) box.append(el("p", "limit", `limit hit: ${limit}`));
      for (const out of ev.outputs || []) box.append(el("p", out.ok ? "note" : "error", `${out.ok ? "ok" : "not ok"} ${out.path}: ${out.detail}`));
      if (state.view && state.view.kind === "session") setStatus(`ended (${ev.status})`);
      break;
    default:
      title(String(ev.type));
  }
  return box;
}

// A reply as it streams in: its tokens so far, their rate and time, and its text (model output:
// textContent only). A server that does not stream sends none of these; the turn's clock runs alone.
function streamCount(ev) {
  const rate = typeof ev.rate === "number" ? ` · ${ev.rate.toFixed(1)} tokens/s` : "";
  return `receiving the reply: ${ev.tokens} tokens${rate} · ${Number(ev.elapsed_s || 0).toFixed(1)} s`;
}

function streamed(ev) {
  if (!state.streaming) {
    const box = el("div", "event event-model_stream");
    const count = el("p", "stream-count");
    const text = el("div", "message streaming");
    box.append(count, text);
    $("transcript").append(box);
    state.streaming = { box, count, text, tokens: 0 };
    if (state.activity) {  // the same wait, now with tokens: its clock goes on
      state.activity.label = "the model is replying";
      setStatus(state.activity.label);
    }
  }
  const shown = state.streaming.text;
  if (ev.tokens <= state.streaming.tokens) shown.replaceChildren();  // a new request (a retry, a cut reply's continuation)
  state.streaming.tokens = ev.tokens;
  state.streaming.count.textContent = streamCount(ev);
  if (ev.text && shown.textContent.length < STREAM_SHOWN_CHARS) shown.append(document.createTextNode(ev.text));
}

function endStream() {
  if (state.streaming) state.streaming.box.remove();
  state.streaming = null;
}

// The sandbox's connection attempts (egress events), consecutive ones in one compact table. Each
// value is the server's `row` (record.notes.egress_row, the same reading as `show` and MCP), put
// in as text: host and reason are the sandbox's.
const EGRESS_COLUMNS = ["method", "host", "port", "outcome", "why", "bytes up", "bytes down", "time"];

function egressRow(ev) {
  const row = ev.row || {};
  const last = $("transcript").lastElementChild;
  let box = null;
  let table = last && last.classList.contains("event-egress") ? last.querySelector("table") : null;
  if (!table) {
    box = el("div", "event event-egress");
    box.append(el("h4", null, "Network connections"));
    table = el("table", "egress");
    const head = table.createTHead().insertRow();
    for (const name of EGRESS_COLUMNS) {
      const th = el("th", null, name);
      th.scope = "col";
      head.append(th);
    }
    table.createTBody();
    const scroll = el("div", "table-scroll");
    scroll.append(table);
    box.append(scroll);
  }
  const why = row.outcome === "allowed" ? (row.address ? `via ${row.address}` : "") : row.reason;
  const tr = el("tr", `egress-${String(row.outcome).replace(/[^a-z]/g, "")}`);
  const time = typeof row.duration_s === "number" ? `${row.duration_s.toFixed(3)} s` : "";
  for (const value of [row.method, row.host, row.port, row.outcome, why, row.bytes_up, row.bytes_down, time]) {
    tr.append(el("td", null, value));
  }
  table.tBodies[0].append(tr);
  return box;
}

// One event into the transcript; `follow` keeps the newest in sight (a past run scrolls once, at the end).
function addEvent(ev, follow = true) {
  const box = renderEvent(ev);
  const transcript = $("transcript");
  if (box) transcript.append(box);
  if (follow) transcript.scrollTop = transcript.scrollHeight;
}

let refreshing = null;
function refreshFiles() {
  if (refreshing) return;  // one listing at a time; a later event asks again after it
  refreshing = setTimeout(async () => {
    refreshing = null;
    const view = state.view;
    try {
      const { files, left_out: leftOut } = await api(`${base()}/files`);
      if (view !== state.view) return;
      const list = $("file-list");
      list.replaceChildren();
      for (const kept of leftOut) {  // what the exit policy keeps in the sandbox, and why: never a link
        list.append(el("li", "note", `${kept.shown}: left out (${kept.reason})`));
      }
      for (const file of files) {
        const item = el("li");
        const open = el("button", "file", file.shown);  // the display form: a bidi override shows as its escape
        open.type = "button";
        open.dataset.path = file.path;
        open.addEventListener("click", () => previewFile(file.path));
        const link = el("a", "download", "download");
        link.href = "#";
        link.addEventListener("click", (event) => { event.preventDefault(); download(fileUrl("file", file.path), downloadName(file.path)); });
        item.append(open, " ", el("span", "note", `${file.size} bytes `), link);
        list.append(item);
        const newPlot = !state.files.has(file.path) && IMAGE_FILE.test(file.path) && file.path.startsWith("output/");
        if (newPlot && view.kind === "session") previewFile(file.path);  // a live session's new plot shows as it is written
        state.files.add(file.path);
      }
      placeFigures(files.map((file) => file.path));
    } catch (error) { showError(`files: ${error.message}`); }
  }, 150);
}

// The only place HTML from the server is parsed: the server's Markdown rendering, sanitised by
// nh3 (no script, handler, style, image or form; links http/https/mailto only).
// A wide table scrolls inside its own box, which a keyboard can reach.
function insertSanitised(container, html) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  container.append(...Array.from(doc.body.childNodes, (node) => document.importNode(node, true)));
  for (const table of container.querySelectorAll("table")) {
    const scroller = el("div", "table-scroll markdown-table");
    scroller.tabIndex = 0;
    scroller.setAttribute("role", "region");
    scroller.setAttribute("aria-label", "table");
    table.replaceWith(scroller);
    scroller.append(table);
  }
}

async function previewFile(path) {
  const box = $("preview");
  const seq = ++state.previewSeq;  // the latest preview asked for wins, whichever answer comes first
  try {
    const view = state.view;
    const preview = await api(fileUrl("preview", path));
    if (view !== state.view || seq !== state.previewSeq) return;
    box.replaceChildren(el("h4", null, shownName(path)));
    box.dataset.path = path;
    box.dataset.kind = preview.kind;
    if (preview.kind === "image") {
      const img = el("img", "preview-image");
      img.alt = shownName(path);
      showImage(img, fileUrl("file", path) + "&inline=1");
      box.append(img);
    } else if (preview.kind === "csv") {
      const table = el("table", "csv");
      const head = el("tr");
      for (const cell of preview.header) head.append(el("th", null, cell));
      table.append(el("thead"), el("tbody"));
      table.tHead.append(head);
      for (const row of preview.rows) {
        const tr = el("tr");
        for (const cell of row) tr.append(el("td", null, cell));
        table.tBodies[0].append(tr);
      }
      const scroller = el("div", "table-scroll");
      scroller.tabIndex = 0;  // a scrolling region is reachable by keyboard
      scroller.setAttribute("role", "region");
      scroller.setAttribute("aria-label", `table ${shownName(path)}`);
      scroller.append(table);
      box.append(scroller);
      for (const note of preview.cut) box.append(el("p", "note", note));
    } else if (preview.kind === "markdown") {
      const md = el("div", "markdown");
      insertSanitised(md, preview.html);
      box.append(md);
    } else if (preview.kind === "text") {
      const text = el("pre", "text", preview.text);
      text.tabIndex = 0;  // it may scroll: a keyboard must reach it
      box.append(text);
      if (preview.cut) box.append(el("p", "note", "only the start is shown"));
    } else {
      box.append(el("p", "note", preview.note));
    }
  } catch (error) { showError(`preview: ${error.message}`); }
}

// --- live sessions ---

// The session's events as server-sent events, read from a fetch stream (EventSource cannot send
// the Authorization header). Like EventSource it asks again after a break, with Last-Event-ID, so
// nothing is shown twice; it stops when the session is gone (any refusal) or the view changes.
function follow(id) {
  const controller = new AbortController();
  state.source = { close: () => controller.abort() };
  let lastId = null;
  const dispatch = (fields) => {
    if (controller.signal.aborted) return;  // the view moved on: nothing more goes into it
    if (fields.id !== undefined) lastId = fields.id;
    if (fields.data !== undefined) addEvent(JSON.parse(fields.data));
  };
  const read = async () => {
    const headers = lastId === null ? {} : { "Last-Event-ID": lastId };
    const response = await authedFetch(`/api/sessions/${encodeURIComponent(id)}/events`, { headers, signal: controller.signal });
    if (!response.ok) return false;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let fields = {};
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return true;
      buffer += value;
      const lines = buffer.split(/\r\n|\n|\r(?=.)/s);
      buffer = lines.pop();
      for (const line of lines) {
        if (line === "") { dispatch(fields); fields = {}; continue; }
        const colon = line.indexOf(":");
        if (colon === 0) continue;  // a comment (the server's keep-alive ping)
        const name = colon < 0 ? line : line.slice(0, colon);
        const data = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (name === "data") fields.data = fields.data === undefined ? data : `${fields.data}\n${data}`;
        else if (name === "id") fields.id = data;
      }
    }
  };
  (async () => {
    while (!controller.signal.aborted) {
      let again = false;
      try { again = await read(); } catch (error) { again = !controller.signal.aborted; }
      if (!again || controller.signal.aborted) break;
      await new Promise((resolve) => setTimeout(resolve, SSE_RETRY_MS));
    }
    if (!controller.signal.aborted) setStatus("disconnected");
  })();
}

async function startSession(event) {
  event.preventDefault();
  const request = $("request").value.trim();
  if (!request) return;
  const form = new FormData();
  for (const file of state.picked) form.append("files", file, file.name);
  form.append("model", $("model").value);
  form.append("sandbox", $("sandbox").value);
  $("start").disabled = true;
  try {
    const opened = await api("/api/sessions", { method: "POST", body: form });
    openView({ kind: "session", id: opened.id, name: opened.run }, `Session ${opened.run}`);
    follow(opened.id);
    await sendAsk(request);
  } catch (error) { showError(error.message); }
  finally { $("start").disabled = false; }
}

async function sendAsk(text) {
  await api(`${base()}/ask`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ request: text }),
  });
  working("waiting for the model", true);
}

// Stop the answer in flight: the server cancels the agent's turn and interrupts its cell; the
// record's ask_end (status "stopped") then ends the answer here, and the session goes on.
async function stopAnswer() {
  $("stop").disabled = true;
  if (state.activity) setStatus("stopping");  // the server answers once the answer has ended
  try {
    await api(`${base()}/stop`, { method: "POST" });
  } catch (error) { showError(error.message); $("stop").disabled = false; }
}

async function followUp(event) {
  event.preventDefault();
  const text = $("followup").value.trim();
  if (!text) return;
  try { await sendAsk(text); $("followup").value = ""; } catch (error) { showError(error.message); }
}

async function endSession() {
  const view = state.view;
  try {
    const closed = await api(`${base()}/close`, { method: "POST" });
    if (state.source) { state.source.close(); state.source = null; }
    await openRun(closed.run || view.name);
  } catch (error) { showError(error.message); }
}

// --- past runs ---

async function showRuns() {
  show("runs");
  try {
    const runs = await api("/api/runs");
    const body = $("runs-table").tBodies[0];
    body.replaceChildren();
    for (const run of runs) {
      const tr = el("tr");
      const open = el("button", "run", run.name);
      open.type = "button";
      open.addEventListener("click", () => (run.session ? openLive(run.session, run.name) : openRun(run.name)));
      const first = el("td");
      first.append(open);
      tr.append(first, el("td", null, run.session ? "live" : run.status), el("td", null, run.model), el("td", null, run.request));
      body.append(tr);
    }
  } catch (error) { showError(error.message); }
}

function openLive(id, name) {
  openView({ kind: "session", id, name }, `Session ${name}`);
  follow(id);
  refreshFiles();
}

async function openRun(name) {
  openView({ kind: "run", name }, `Run ${name}`);
  try {
    const record = await api(`/api/runs/${encodeURIComponent(name)}`);
    if (record.error) showError(record.error);
    for (const ev of record.events) addEvent(ev, false);
    $("transcript").scrollTop = $("transcript").scrollHeight;
    for (const note of record.notes || []) $("transcript").append(el("p", "note", note));
    setStatus("past run (read-only)");
    refreshFiles();
  } catch (error) { showError(error.message); }
}

// --- the new-session form ---

function pickFiles(list) {
  for (const file of list) state.picked.push(file);
  const shown = $("picked");
  shown.replaceChildren(...state.picked.map((f) => el("li", null, `${f.name} (${f.size} bytes)`)));
}

async function init() {
  state.picked = [];
  $("token-form").addEventListener("submit", useToken);
  window.addEventListener("hashchange", () => { if (takeToken()) location.reload(); });  // a new #token= in this tab
  takeToken();
  state.token = sessionStorage.getItem(TOKEN_KEY);
  if (!state.token) {  // nothing to offer: every call would be refused
    askForToken("a token is needed: open the URL coderoom serve printed (it holds #token=...), or paste it here");
    return;
  }
  try { state.config = await api("/api/config"); } catch (error) {
    if (error.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      askForToken("this server refused the token: paste the URL coderoom serve printed this time");
    } else showError(error.message);
    return;
  }
  for (const [id, values] of [["model", state.config.models], ["sandbox", state.config.sandboxes]]) {
    for (const value of values) { const option = el("option", null, value); option.value = value; $(id).append(option); }
  }
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); pickFiles(e.dataTransfer.files); });
  $("files").addEventListener("change", (e) => pickFiles(e.target.files));
  $("new-form").addEventListener("submit", startSession);
  $("ask-form").addEventListener("submit", followUp);
  for (const [field, form] of [["request", "new-form"], ["followup", "ask-form"]]) {
    $(field).addEventListener("keydown", (event) => {  // Enter sends, Shift+Enter is a new line
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); $(form).requestSubmit(); }
    });
  }
  $("close").addEventListener("click", endSession);
  $("stop").addEventListener("click", stopAnswer);
  $("nav-new").addEventListener("click", () => show("new"));
  $("nav-runs").addEventListener("click", showRuns);
  document.body.dataset.ready = "1";
}

document.addEventListener("DOMContentLoaded", init);
