// The web view of the agent gateway (README.md#the-web-view). It speaks the same
// WebSocket protocol (§9) and HTTP API as every client; an HttpOnly
// session cookie, set at sign-in, authenticates both. The page never
// holds the token: it sends it once to /login and forgets it.
//
// Events are kept per session with the last seq seen, so a dropped
// connection or a reload resumes the stream after that seq: nothing is
// lost, nothing is shown twice.
'use strict';

const $ = (id) => document.getElementById(id);

// h builds an element. Text always goes in as text, never as markup, so
// nothing an event carries can become part of the page.
function h(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const TERMINAL = new Set(['run.completed', 'run.failed', 'run.cancelled', 'run.interrupted']);
// RESUMABLE are the statuses run.resume continues from, as the gateway's
// RunInfo.resumable says (store.RunView): every end but completed and cancelled.
const RESUMABLE = new Set(['interrupted', 'failed', 'planned']);
// Events that change a harness run's phase board.
const BOARD_EVENTS = new Set(['plan.created', 'phase.started', 'phase.completed', 'phase.failed',
  'verification.completed', 'receipt.recorded', 'artifact.created', 'learning.recorded', 'approach.failed', 'effect.failed']);

// MAX_SAVED_FRAMES bounds what a session keeps in the tab's storage for
// a reload; a longer one is replayed from the store instead.
const MAX_SAVED_FRAMES = 5000;

const short = (id) => (id || '').slice(0, 8);
// phaseName shows the planner's reserved phase id (event.PlannerPhaseID) as a word.
const phaseName = (id) => (id === '_plan' ? 'planner' : id);

function duration(ms) {
  if (ms === undefined || ms === null) return '';
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1 << 20)).toFixed(1)} MiB`;
}

function ago(ts) {
  const s = Math.max(0, (Date.now() - new Date(ts).getTime()) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(ts).toLocaleDateString();
}

const isZeroTime = (ts) => !ts || ts.startsWith('0001-');

// inZone shows a time in a job's time zone, with the zone's name.
function inZone(ts, tz) {
  if (isZeroTime(ts)) return '—';
  const opts = { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', timeZoneName: 'short' };
  try {
    return new Intl.DateTimeFormat(undefined, { ...opts, timeZone: tz || 'UTC' }).format(new Date(ts));
  } catch {
    return new Intl.DateTimeFormat(undefined, { ...opts, timeZone: 'UTC' }).format(new Date(ts));
  }
}

// findings says a verification's status and notes, once: a verifier's
// notes often start with the status.
function findings(v) {
  let notes = (v.notes || []).join('; ');
  if (notes.startsWith(`${v.status}:`)) notes = notes.slice(v.status.length + 1).trim();
  return notes ? `${v.status}: ${oneLine(notes, 200)}` : v.status;
}

// progressText is a call's progress as its line shows it: "3/5 message".
function progressText(d) {
  const n = (x) => String(Math.round(x * 100) / 100);
  const part = d.total ? `${n(d.progress)}/${n(d.total)}` : n(d.progress);
  return d.message ? `${part} ${oneLine(d.message, 80)}` : part;
}

function oneLine(s, n) {
  s = String(s ?? '').replace(/\s+/g, ' ').trim();
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

// ---- HTTP ----

// api calls the gateway's HTTP API with the session cookie. A refusal
// carries the gateway's message and code.
async function api(method, path, body) {
  const opts = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  let data = null;
  try {
    data = await res.json();
  } catch {
    // not JSON: the status says enough
  }
  if (!res.ok) {
    const err = new Error(data?.error?.message || `${res.status} ${res.statusText}`);
    err.status = res.status;
    err.code = data?.error?.code;
    throw err;
  }
  return data;
}

// ---- WebSocket ----

class Gateway {
  constructor() {
    this.ws = null;
    this.next = 1;
    this.pending = new Map();
    this.wanted = false;
    this.retries = 0;
    this.timer = null;
  }

  start() {
    this.wanted = true;
    if (!this.ws) this.open();
  }

  stop() {
    this.wanted = false;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close(1000, 'signed out');
  }

  open() {
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${scheme}//${location.host}/ws`);
    this.ws = ws;
    setConn(this.retries ? 'reconnecting' : 'connecting');
    ws.onopen = async () => {
      try {
        // No token: the cookie authenticated the upgrade.
        const hello = await this.call('connect', { protocol: 1 });
        this.retries = 0;
        onConnected(hello);
      } catch (err) {
        if (err.code === 'unauthorized') signedOut(err.message);
      }
    };
    ws.onmessage = (m) => {
      let f;
      try {
        f = JSON.parse(m.data);
      } catch {
        return;
      }
      this.frame(f);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      for (const p of this.pending.values()) p.reject(Object.assign(new Error('the connection was lost'), { code: 'disconnected' }));
      this.pending.clear();
      onDisconnected();
      if (this.wanted) this.reconnect();
    };
  }

  // reconnect tries again with backoff, once the cookie still signs in:
  // a refused upgrade tells the page nothing, GET /login does.
  reconnect() {
    setConn('reconnecting');
    const delay = Math.min(500 * 2 ** this.retries, 10000);
    this.retries++;
    this.timer = setTimeout(async () => {
      if (!this.wanted) return;
      let st;
      try {
        st = await api('GET', '/login');
      } catch {
        this.reconnect();
        return;
      }
      if (!st.signed_in) {
        signedOut(st.message);
        return;
      }
      if (this.wanted && !this.ws) this.open();
    }, delay);
  }

  call(method, params) {
    return new Promise((resolve, reject) => {
      if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
        reject(Object.assign(new Error('not connected to the gateway; retrying'), { code: 'disconnected' }));
        return;
      }
      const id = String(this.next++);
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ type: 'req', id, method, params: params || {} }));
    });
  }

  frame(f) {
    if (f.type === 'res') {
      const p = this.pending.get(f.id);
      if (!p) return;
      this.pending.delete(f.id);
      if (f.ok) p.resolve(f.result);
      else p.reject(Object.assign(new Error(f.error?.message || 'request failed'), { code: f.error?.code }));
    } else if (f.type === 'event') {
      onEvent(f);
    } else if (f.type === 'error') {
      // slow_consumer and the like: the connection closes next, and the
      // reconnect resumes after the last seq seen.
      console.warn('gateway:', f.error?.code, f.error?.message);
    }
  }
}

const gw = new Gateway();

// ---- State ----

const state = {
  methods: new Set(),
  sessions: [],
  selected: null, // session id
  streams: new Map(), // session id -> Stream
  runs: new Map(), // run id -> RunInfo, updated by events
  selectedRun: null,
  view: null, // the View of the selected session
};

// Stream is one session's events as this page has them: in seq order,
// each once. last is the last seq seen.
class Stream {
  constructor(id) {
    this.id = id;
    this.frames = [];
    this.last = 0;
    this.attached = false; // on the current connection
    this.dirty = false;
  }

  key() {
    return `agent.stream.${this.id}`;
  }

  // restore takes the frames a reload left in sessionStorage.
  restore() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(this.key()) || 'null');
      if (Array.isArray(saved?.frames)) {
        this.frames = saved.frames.filter((f) => Number.isInteger(f?.seq));
        this.resumePoint();
      }
    } catch {
      sessionStorage.removeItem(this.key());
    }
  }

  // add keeps a frame unless it was seen already; false if it was.
  add(f) {
    if (f.seq <= this.last) return false;
    this.frames.push(f);
    this.last = f.seq;
    this.dirty = true;
    scheduleSave();
    return true;
  }

  // resumePoint drops the streamed text after the last other event and
  // returns that event's seq, where session.resume picks up: text
  // streamed by a gateway that crashed since is not in its store, and
  // its seqs are reused (protocol.go, SessionResumeParams). A running
  // gateway sends such text again. Returns whether frames were dropped.
  resumePoint() {
    let i = this.frames.length;
    while (i > 0 && this.frames[i - 1].event === 'message.delta') i--;
    const dropped = i < this.frames.length;
    this.frames.length = i;
    this.last = i ? this.frames[i - 1].seq : 0;
    return dropped;
  }

  save() {
    if (!this.dirty) return;
    this.dirty = false;
    if (this.frames.length > MAX_SAVED_FRAMES) {
      sessionStorage.removeItem(this.key()); // a reload replays from the start
      return;
    }
    try {
      sessionStorage.setItem(this.key(), JSON.stringify({ frames: this.frames }));
    } catch {
      // Too big for the tab's storage: a reload replays from the start.
      sessionStorage.removeItem(this.key());
    }
  }
}

let saveTimer = null;
function scheduleSave() {
  if (saveTimer) return;
  saveTimer = setTimeout(saveAll, 400);
}
function saveAll() {
  clearTimeout(saveTimer);
  saveTimer = null;
  for (const st of state.streams.values()) st.save();
}

function stream(id) {
  let st = state.streams.get(id);
  if (!st) {
    st = new Stream(id);
    st.restore();
    state.streams.set(id, st);
  }
  return st;
}

// attach joins a session's stream on this connection: the events after
// the last one seen, then live ones.
async function attach(st) {
  if (st.resumePoint() && st.id === state.selected) renderStream();
  st.attached = true;
  const after = st.last;
  try {
    await gw.call('session.resume', { session_id: st.id, after_seq: after });
    if (st.id === state.selected) $('stream').dataset.resumedAfter = String(after);
  } catch (err) {
    st.attached = false;
    throw err;
  }
}

// ---- The event stream of the selected session ----

// RunView is one run's block in the stream.
class RunView {
  constructor(runID) {
    this.id = runID;
    this.texts = new Map(); // phase/attempt -> the assistant text being streamed
    this.tools = new Map(); // call id -> tool line
    this.lastText = '';
    this.status = h('span', { class: 'badge' });
    this.kind = h('span', { class: 'muted small' });
    this.promptLine = h('span', { class: 'prompt-line' });
    this.head = h('button', { type: 'button', class: 'run-head', onclick: () => selectRun(runID) },
      h('span', { class: 'mono', text: short(runID) }), this.kind, this.promptLine, this.status);
    this.body = h('div', { class: 'run-body' });
    this.el = h('article', { class: 'run', dataset: { run: runID } }, this.head, this.body);
    this.thinkingEl = h('div', { class: 'thinking', text: 'thinking' });
    this.running = new Set(); // tool calls under way
    this.refresh();
  }

  // thinking shows, at the end of the run, that the model works on its
  // next message: none of its text or tool calls has come yet.
  thinking(on) {
    if (on && !this.running.size) this.body.append(this.thinkingEl);
    else this.thinkingEl.remove();
  }

  refresh() {
    const info = state.runs.get(this.id) || {};
    const status = info.status || 'running';
    this.status.textContent = status;
    this.status.className = `badge s-${status}`;
    this.el.dataset.status = status;
    this.kind.textContent = info.kind === 'harness' ? 'harness' : '';
    this.promptLine.textContent = oneLine(info.prompt, 120);
    this.el.classList.toggle('selected', this.id === state.selectedRun);
  }

  line(cls, text, tag) {
    this.body.append(h('div', { class: `line ${cls}` }, tag ? h('span', { class: 'tag', text: tag }) : null, text));
  }

  textKey(f) {
    return `${f.phase_id || ''}/${f.attempt || 0}`;
  }

  delta(f, text) {
    this.thinking(false);
    const k = this.textKey(f);
    let el = this.texts.get(k);
    if (!el) {
      el = h('div', { class: 'assistant', dataset: { streaming: 'true' } });
      this.texts.set(k, el);
      this.body.append(el);
    }
    el.textContent += text;
  }

  // message ends the text being streamed with the whole message.
  message(f, text) {
    const k = this.textKey(f);
    let el = this.texts.get(k);
    this.texts.delete(k);
    if (!text && !el) return;
    if (!el) {
      el = h('div', { class: 'assistant' });
      this.body.append(el);
    }
    el.textContent = text;
    el.dataset.streaming = 'false';
    if (text) this.lastText = text;
  }

  toolStarted(d, f) {
    let args = '';
    try {
      args = typeof d.args === 'string' ? d.args : JSON.stringify(d.args);
    } catch {
      args = '';
    }
    const mark = h('span', { class: 'mark', text: '…' });
    const summary = h('summary', {}, mark, f.phase_id ? h('span', { class: 'muted', text: `[${phaseName(f.phase_id)}]` }) : null,
      h('span', { class: 'name', text: d.name }), h('span', { class: 'args', text: oneLine(args, 200) }));
    const el = h('details', { class: 'tool', dataset: { call: d.call_id, name: d.name, state: 'running' } }, summary);
    this.tools.set(d.call_id, { el, mark });
    this.running.add(d.call_id);
    this.thinking(false);
    this.body.append(el);
  }

  // toolProgress shows how far a running call has come on its line.
  toolProgress(d) {
    const t = this.tools.get(d.call_id);
    if (!t || t.el.dataset.state !== 'running') return;
    if (!t.progress) {
      t.progress = h('span', { class: 'muted progress' });
      t.el.querySelector('summary').append(t.progress);
    }
    t.progress.textContent = progressText(d);
  }

  toolCompleted(d) {
    const t = this.tools.get(d.call_id);
    if (t?.progress) t.progress.remove();
    this.running.delete(d.call_id);
    if (!t) return;
    t.el.dataset.state = d.ok ? 'ok' : 'error';
    t.mark.textContent = d.ok ? '✓' : '✗';
    let out = d.output || '';
    if (d.error && !out.includes(d.error)) out = out ? `${out}\n${d.error}` : d.error;
    if (d.truncated) out += '\n… (truncated)';
    t.el.append(h('pre', { class: 'output', text: out || '(no output)' }));
  }

  end(f, d) {
    const status = d.status || f.event.replace('run.', '');
    const facts = [status];
    if (d.reason && d.reason !== status) facts.push(`reason ${d.reason}`);
    if (d.turns) facts.push(`${d.turns} turns`);
    const tokens = (d.usage?.prompt_tokens || 0) + (d.usage?.completion_tokens || 0);
    if (tokens) facts.push(`${tokens} tokens`);
    if (d.duration_ms) facts.push(duration(d.duration_ms));
    const el = h('div', { class: `end s-${status}`, dataset: { status, reason: d.reason || '' } },
      h('strong', { text: facts.join(' · ') }));
    if (d.detail && d.detail !== d.reason) el.append(h('span', { class: 'result', text: d.detail }));
    if (d.result && d.result !== this.lastText) el.append(h('span', { class: 'result', text: d.result }));
    if (RESUMABLE.has(status)) {
      // The run's latest end offers to go on (run.resume); a later start takes it away.
      el.append(h('button', { type: 'button', class: 'small primary resume', onclick: () => resumeRun(this.id) }, 'Resume'));
    }
    this.body.append(el);
    for (const t of this.texts.values()) t.dataset.streaming = 'false'; // cut off: no more will come
    this.texts.clear();
    this.running.clear();
    this.thinking(false);
  }
}

// View renders one session's frames.
class View {
  constructor(container) {
    this.container = container;
    this.runs = new Map();
  }

  run(id) {
    let r = this.runs.get(id);
    if (!r) {
      r = new RunView(id);
      this.runs.set(id, r);
      this.container.append(r.el);
    }
    return r;
  }

  apply(f) {
    if (!f.run_id) return;
    const r = this.run(f.run_id);
    const d = f.data || {};
    if (f.subagent) {
      // A sub-run's event (the task tool): its tool lines, under its task.
      if (f.event === 'run.started' && d.task) subagentTasks.set(f.subagent, d.task);
      if (f.event === 'tool.completed') {
        const task = subagentTasks.get(f.subagent) || short(f.subagent);
        r.line(d.ok ? 'quiet' : 'bad', `↳ ${oneLine(task, 60)}: ${d.name}${d.ok ? '' : ' failed: ' + oneLine(d.error || '', 200)}`, 'subagent');
      }
      return;
    }
    const phase = f.phase_id ? `${phaseName(f.phase_id)}${f.attempt ? ' #' + f.attempt : ''}` : '';
    switch (f.event) {
      case 'run.started': {
        for (const b of r.body.querySelectorAll('.end button.resume')) b.remove();
        const bits = ['started'];
        if (d.model) bits.push(d.model);
        if (d.sandbox) bits.push(`sandbox ${d.sandbox}`);
        if (d.resumed) bits.push('resumed');
        if (d.mcp_servers?.length) bits.push(`MCP ${d.mcp_servers.join(', ')}`);
        r.line('quiet', bits.join(' · '));
        r.thinking(true);
        break;
      }
      case 'message.delta':
        r.delta(f, d.text || '');
        break;
      case 'message.completed':
        if (d.role === 'user') {
          if (!f.phase_id) r.body.append(h('div', { class: 'user', text: d.text || '' }));
        } else {
          r.message(f, d.text || '');
        }
        r.thinking(d.role === 'user');
        break;
      case 'tool.started':
        r.toolStarted(d, f);
        break;
      case 'tool.progress':
        r.toolProgress(d);
        break;
      case 'tool.completed':
        r.toolCompleted(d);
        r.thinking(true); // its result goes back to the model
        break;
      case 'retry':
        r.line('warn', `model call retried (attempt ${d.attempt}${d.max_attempts ? '/' + d.max_attempts : ''}) in ${duration(d.delay_ms)}: ${oneLine(d.error, 200)}`, 'retry');
        break;
      case 'warning':
        r.line('warn', d.message || '', 'warning');
        break;
      case 'run.waiting':
        r.thinking(false);
        r.line('warn', `waiting for ${d.kind === 'approval' ? `approval of ${d.tool} ${oneLine(JSON.stringify(d.args || {}), 200)}` : d.kind === 'question' ? `an answer: ${oneLine(d.question, 200)}` : d.kind === 'signal' ? `signal ${d.name}` : `a time${d.reason ? ' (' + d.reason.replace('_', ' ') + ')' : ''}`} until ${d.until}`, 'wait');
        break;
      case 'wait.resolved':
        r.line(d.outcome === 'denied' || d.outcome === 'timed_out' ? 'bad' : 'ok', `${d.outcome.replace('_', ' ')} (${d.via}${d.who ? ', ' + d.who : ''})${d.reason ? ': ' + oneLine(d.reason, 200) : ''}${d.answer ? ': ' + oneLine(d.answer, 200) : ''}`, 'wait');
        r.thinking(true);
        break;
      case 'effect.failed':
        r.line('warn', `side effect ${d.key} did not happen: ${oneLine(d.error, 200)}`, 'effect');
        break;
      case 'effect.unknown':
        r.line('bad', `side effect ${d.key} may or may not have happened: ${oneLine(d.error, 200)}; it is not sent again unless resumed with --resend-unknown`, 'effect');
        break;
      case 'iteration.started':
        r.line('quiet', `iteration ${d.iteration}${d.max_iterations ? ' of ' + d.max_iterations : ''}`);
        break;
      case 'iteration.completed':
        r.line('quiet', `iteration ${d.iteration} ${d.completed ? 'kept its promise' : 'ended'}${d.reason ? ': ' + d.reason : ''}`);
        break;
      case 'plan.created': {
        let n = 0;
        try {
          n = (typeof d.plan === 'string' ? JSON.parse(d.plan) : d.plan)?.phases?.length || 0;
        } catch {
          n = 0;
        }
        r.line('quiet', `plan: ${n} phase${n === 1 ? '' : 's'}`, 'plan');
        break;
      }
      case 'phase.started':
        r.line('quiet', `started${d.title ? ': ' + d.title : ''}`, phase);
        break;
      case 'phase.completed':
        r.line('ok', `passed${d.duration_ms ? ' in ' + duration(d.duration_ms) : ''}`, phase);
        break;
      case 'phase.failed':
        r.line('bad', `${d.status || 'failed'}${d.reason ? ': ' + oneLine(d.reason, 200) : ''}${d.will_retry ? ' · will retry' : ''}`, phase);
        break;
      case 'verification.completed':
        r.line(d.status === 'pass' ? 'ok' : d.status === 'warn' ? 'warn' : 'bad',
          `verification ${findings(d)}`, phase);
        break;
      case 'artifact.created':
        r.line('quiet', `wrote ${d.path} (${bytes(d.bytes || 0)})`, 'artifact');
        break;
      case 'receipt.recorded':
        r.line('ok', `${d.type || 'side effect'} ${d.key}`, 'receipt');
        break;
      case 'learning.recorded':
        r.line('quiet', d.text || '', 'learned');
        break;
      case 'approach.failed':
        r.line('warn', `${d.approach}: ${d.why}`, 'guardrail');
        break;
      case 'checkpoint.created':
        r.line('quiet', `${d.path} ${d.existed ? 'saved before the change' : 'is new'}`, 'checkpoint');
        break;
      case 'rewind.completed': {
        const files = (d.files || []).map((x) => `${x.outcome} ${x.path}`).join(', ');
        r.line('ok', `rewound to checkpoint #${d.to}${files ? ': ' + files : ''}`, 'rewind');
        break;
      }
      case 'context.compacted':
        r.line('quiet', `context compacted: ${d.tokens_before} → ${d.tokens_after} tokens`, 'context');
        break;
      case 'hook.completed':
        if (d.decision || d.exit_code !== 0) {
          r.line(d.decision === 'deny' || d.decision === 'stop' ? 'warn' : 'quiet',
            `${d.event}: ${d.decision || 'exit ' + d.exit_code}${d.reason ? ' · ' + oneLine(d.reason, 200) : ''}`, 'hook');
        }
        break;
      case 'heartbeat':
        break;
      default:
        if (TERMINAL.has(f.event)) r.end(f, d);
    }
  }
}

function renderSessionMeta() {
  const id = state.selected;
  if (!id) return;
  const n = [...state.runs.values()].filter((r) => r.session_id === id).length;
  $('session-meta').textContent = `${short(id)} · ${n} run${n === 1 ? '' : 's'}`;
}

function renderStream() {
  const box = $('stream');
  box.replaceChildren();
  const st = state.selected && state.streams.get(state.selected);
  state.view = new View(box);
  if (!st) {
    box.append(h('p', { class: 'empty', text: 'Select a session, or start a run below: it gets a session of its own.' }));
    return;
  }
  for (const f of st.frames) state.view.apply(f);
  if (!st.frames.length) box.append(h('p', { class: 'empty', text: 'No events yet.' }));
  box.scrollTop = box.scrollHeight;
}

// ---- Incoming events ----

function onEvent(f) {
  if (!f.session_id) {
    // A job event: no session, no seq; job.list has the state.
    scheduleJobs();
    return;
  }
  const st = stream(f.session_id);
  if (!st.add(f)) return; // replayed again: shown already
  trackRun(f);
  if (f.session_id === state.selected && state.view) {
    const box = $('stream');
    const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    box.querySelector(':scope > .empty')?.remove();
    state.view.apply(f);
    state.view.runs.get(f.run_id)?.refresh();
    if (atEnd) box.scrollTop = box.scrollHeight;
  }
  if (f.event === 'run.waiting' || f.event === 'wait.resolved') scheduleInbox(100);
  if (f.run_id && f.run_id === state.selectedRun) {
    renderRunPanel();
    if (BOARD_EVENTS.has(f.event) || TERMINAL.has(f.event)) scheduleBoard();
    if (f.event === 'checkpoint.created' || f.event === 'rewind.completed' || TERMINAL.has(f.event)) scheduleCheckpoints();
  }
}

// subagentTasks are the task descriptions of the sub-runs shown, by id.
const subagentTasks = new Map();

// trackRun keeps a run's status as its events tell it; a sub-run's events
// (subagent set) tell nothing of its parent's.
function trackRun(f) {
  if (!f.run_id || f.subagent) return;
  let info = state.runs.get(f.run_id);
  if (!info) {
    info = { run_id: f.run_id, session_id: f.session_id, status: 'running', kind: 'run' };
    state.runs.set(f.run_id, info);
  }
  const d = f.data || {};
  if (f.session_id === state.selected && f.event === 'run.started') renderSessionMeta();
  if (f.event === 'run.started') {
    info.status = 'running';
    if (d.prompt) info.prompt = d.prompt;
  } else if (f.event === 'run.waiting' && !f.phase_id) {
    info.status = 'waiting';
  } else if (f.event === 'plan.created' || f.event === 'phase.started') {
    info.kind = 'harness';
  } else if (TERMINAL.has(f.event)) {
    info.status = d.status || f.event.replace('run.', '');
    info.reason = d.reason;
    info.resumable = RESUMABLE.has(info.status);
  }
  if (f.event === 'run.started') info.resumable = false;
}

// ---- Sessions ----

async function refreshSessions() {
  const list = await gw.call('session.list', { include_jobs: true });
  state.sessions = list.sessions || [];
  renderSessions();
}

function renderSessions() {
  const ul = $('sessions');
  ul.replaceChildren();
  if (!state.sessions.length) {
    ul.append(h('li', { class: 'muted small', text: 'No sessions yet.' }));
    return;
  }
  for (const s of state.sessions) {
    const meta = [`${s.runs} run${s.runs === 1 ? '' : 's'}`, ago(s.updated_at)];
    if (s.job_id) meta.push('scheduled');
    if (s.local) meta.push('agent chat’s, read only here');
    // A fork says what it was forked from, and where: it starts with its
    // parent's title and conversation, and would look the same.
    const fork = s.parent_id ? h('span', { class: 'meta fork',
      text: `fork of ${sessionName(state.sessions.find((p) => p.session_id === s.parent_id) || { session_id: s.parent_id, runs: 1 })}${s.forked_from_seq ? ' at seq ' + s.forked_from_seq : ''}` }) : null;
    ul.append(h('li', {}, h('button', {
      type: 'button', class: `item${s.session_id === state.selected ? ' selected' : ''}`,
      dataset: s.parent_id ? { session: s.session_id, fork: s.parent_id } : { session: s.session_id }, onclick: () => selectSession(s.session_id),
      title: s.parent_id ? `Forked from session ${s.parent_id}` : false,
    }, h('span', { class: 'title', text: sessionName(s) }), fork, h('span', { class: 'meta', text: meta.join(' · ') }))));
  }
  renderSessionTitle();
}

// sessionName is what a session is called: its title, else "New session"
// until its first run titles it.
function sessionName(s) {
  return s.title || (s.runs ? `session ${short(s.session_id)}` : 'New session');
}

function renderSessionTitle() {
  const s = state.selected && state.sessions.find((x) => x.session_id === state.selected);
  if (s) $('session-title').textContent = sessionName(s);
  $('delete-session').hidden = !state.selected;
}

async function selectSession(id) {
  if (state.selected !== id) hideError('session-error');
  state.selected = id;
  sessionStorage.setItem('agent.selected', id);
  renderSessions();
  const st = stream(id);
  renderStream();
  try {
    const d = await gw.call('session.get', { session_id: id });
    for (const r of d.runs || []) state.runs.set(r.run_id, r);
    $('session-title').textContent = sessionName(d.session);
    $('delete-session').hidden = false;
    renderSessionMeta();
    if (state.selected !== id) return;
    if (!st.attached) await attach(st);
    for (const r of state.view.runs.values()) r.refresh();
    const last = d.runs.length ? d.runs[d.runs.length - 1].run_id : null;
    const current = state.runs.get(state.selectedRun);
    if (!current || current.session_id !== id) selectRun(last);
  } catch (err) {
    if (err.code === 'not_found') {
      sessionStorage.removeItem('agent.selected');
      state.selected = null;
      renderStream();
      renderSessionTitle();
    }
    showError('start-error', err.message);
  }
}

// deleteSession deletes the selected session with its runs, once asked;
// the gateway keeps one whose run is running or waiting, saying why.
async function deleteSession() {
  const id = state.selected;
  if (!id) return;
  hideError('session-error');
  const s = state.sessions.find((x) => x.session_id === id) || { session_id: id, runs: 0 };
  const ok = await confirmDialog({
    title: `Delete ${sessionName(s)}?`,
    text: `The session ${short(id)} goes, with its ${s.runs} run${s.runs === 1 ? '' : 's'} and everything they recorded. Its forks keep their own copy of the conversation. This cannot be undone.`,
    yes: 'Delete session',
  });
  if (!ok) return;
  try {
    await gw.call('session.delete', { session_id: id });
  } catch (err) {
    showError('session-error', err.message);
    return;
  }
  sessionStorage.removeItem(stream(id).key());
  state.streams.delete(id);
  state.sessions = state.sessions.filter((x) => x.session_id !== id);
  if (state.selected === id) {
    state.selected = null;
    sessionStorage.removeItem('agent.selected');
    $('session-title').textContent = 'No session selected';
    $('session-meta').textContent = '';
    renderStream();
    selectRun(null);
  }
  renderSessions();
  refreshSessions().catch(() => {});
}

async function newSession() {
  const s = await gw.call('session.create', {});
  // The creator is attached from the start (docs/PROTOCOL.md#replay-and-attachment).
  stream(s.session_id).attached = true;
  state.sessions.unshift(s);
  await selectSession(s.session_id);
  return s.session_id;
}

// ---- Starting and stopping runs ----

async function startRun(ev) {
  ev.preventDefault();
  hideError('start-error');
  const input = $('input').value.trim();
  if (!input) return;
  const harness = $('harness').checked;
  $('start-button').disabled = true;
  try {
    // Without a session the gateway makes one, only for a run it accepts.
    const res = await gw.call('run.start', { session_id: state.selected || undefined, input, options: harness ? { harness: true } : {} });
    const sid = res.session_id;
    if (sid !== state.selected) {
      stream(sid).attached = true; // from its first event, as its creator
      await refreshSessions();
      await selectSession(sid);
    }
    state.runs.set(res.run_id, {
      ...(state.runs.get(res.run_id) || {}), run_id: res.run_id, session_id: sid, status: res.status,
      kind: harness ? 'harness' : 'run', prompt: input,
    });
    $('input').value = '';
    selectRun(res.run_id);
    refreshSessions().catch(() => {});
  } catch (err) {
    showError('start-error', err.message);
  } finally {
    $('start-button').disabled = false;
  }
}

// resumeRun continues a run that ended without completing (run.resume),
// where it stopped; its events follow in its session.
async function resumeRun(id) {
  hideError('run-error');
  for (const b of document.querySelectorAll('#resume, .end button.resume')) b.disabled = true;
  try {
    const res = await gw.call('run.resume', { run_id: id });
    const info = state.runs.get(id) || { run_id: id, session_id: res.session_id };
    Object.assign(info, { status: res.status, resumable: false });
    state.runs.set(id, info);
    if (state.selectedRun !== id) selectRun(id);
    renderRunPanel();
    state.view?.runs.get(id)?.refresh();
  } catch (err) {
    if (state.selectedRun !== id) selectRun(id);
    showError('run-error', err.message);
  } finally {
    for (const b of document.querySelectorAll('#resume, .end button.resume')) b.disabled = false;
  }
}

async function stopRun(mode) {
  const id = state.selectedRun;
  if (!id) return;
  hideError('run-error');
  if (mode === 'cancel') {
    const ok = await confirmDialog({
      title: `Cancel run ${short(id)}?`,
      text: 'It stops now and ends for good; it cannot be resumed. Interrupt instead stops it resumably.',
      yes: 'Cancel run',
    });
    if (!ok) return;
  }
  try {
    await gw.call('run.cancel', { run_id: id, mode });
  } catch (err) {
    showError('run-error', err.message);
  }
}

// ---- The selected run: details, phase board, checkpoints ----

function selectRun(id) {
  state.selectedRun = id;
  if (state.view) for (const r of state.view.runs.values()) r.refresh();
  $('board-panel').hidden = true;
  $('checkpoints-panel').hidden = true;
  $('rewind-result').replaceChildren();
  renderRunPanel();
  if (!id) return;
  scheduleBoard();
  scheduleCheckpoints();
}

function renderRunPanel() {
  const id = state.selectedRun;
  $('run-panel').hidden = !id;
  if (!id) return;
  const info = state.runs.get(id) || { status: 'running' };
  $('run-id').textContent = short(id);
  $('run-id').title = id;
  $('run-status').textContent = info.status;
  $('run-status').className = `badge s-${info.status}`;
  $('run-prompt').textContent = info.prompt || '';
  const meta = [info.kind === 'harness' ? 'harness run' : 'run'];
  if (info.model) meta.push(info.model);
  if (info.workspace) meta.push(info.workspace);
  $('run-meta').textContent = meta.join(' · ');
  const active = info.status === 'running' || info.status === 'queued' || info.status === 'waiting';
  $('run-actions').hidden = !active;
  $('interrupt').hidden = info.status === 'waiting'; // it runs nothing: cancel it, or answer it
  const resumable = !active && (info.resumable ?? RESUMABLE.has(info.status));
  $('resume-actions').hidden = !resumable;
  $('resume-note').textContent = resumable ? `${info.status}${info.reason && info.reason !== info.status ? ' (' + info.reason.replaceAll('_', ' ') + ')' : ''}: it goes on where it stopped` : '';
  for (const b of document.querySelectorAll('.rewind')) b.disabled = active;
}

let boardTimer = null;
function scheduleBoard() {
  clearTimeout(boardTimer);
  boardTimer = setTimeout(loadBoard, 150);
}

async function loadBoard() {
  const id = state.selectedRun;
  const info = state.runs.get(id);
  if (!id || info?.kind !== 'harness') {
    $('board-panel').hidden = true;
    return;
  }
  try {
    const board = await api('GET', `/v1/runs/${encodeURIComponent(id)}/phases`);
    if (state.selectedRun === id) renderBoard(board);
  } catch (err) {
    if (err.status === 401) signedOut(err.message);
  }
}

function renderBoard(b) {
  $('board-panel').hidden = false;
  $('objective').textContent = b.objective || (b.phases.length ? '' : 'Planning…');
  const ol = $('phases');
  ol.replaceChildren();
  for (const p of b.phases) {
    const attempts = p.attempts || [];
    const last = attempts[attempts.length - 1];
    const facts = [];
    facts.push(`attempt ${attempts.length}/${p.max_attempts}`);
    const elapsed = h('span', { class: 'elapsed' });
    if (last?.status === 'running' && !isZeroTime(last.started_at)) {
      // The phase's time so far, as it is recorded once it ends: its
      // earlier attempts' and this one's since its phase.started.
      elapsed.dataset.since = last.started_at;
      elapsed.dataset.before = String(attempts.slice(0, -1).reduce((n, a) => n + (a.duration_ms || 0), 0));
      tickOne(elapsed);
    } else if (attempts.length) {
      elapsed.textContent = duration(attempts.reduce((n, a) => n + (a.duration_ms || 0), 0));
    }
    facts.push(evidenceText(p.evidence));
    if (p.depends_on?.length) facts.push(`after ${p.depends_on.join(', ')}`);

    const li = h('li', { class: 'phase', dataset: { phase: p.id, status: p.status } },
      h('div', { class: 'phase-head' },
        h('span', { class: `badge s-${p.status === 'running' ? 'running' : p.status}`, text: p.status }),
        h('span', { class: 'title', text: p.title || p.id }),
        h('span', { class: 'mono muted small', text: p.id })),
      h('div', { class: 'facts' }, facts.join(' · '), elapsed.textContent || elapsed.dataset.since ? ' · ' : '', elapsed));

    const items = [];
    for (const a of attempts) {
      const v = a.verification;
      let text = `#${a.attempt} ${a.status}`;
      if (a.duration_ms) text += ` in ${duration(a.duration_ms)}`;
      if (v) text += ` · findings ${findings(v)}`;
      if (a.reason && a.status !== 'passed') text += ` · ${oneLine(a.reason, 160)}`;
      items.push(h('li', { class: 'attempt', dataset: { status: a.status } }, text));
    }
    for (const x of p.artifacts || []) items.push(h('li', { class: 'artifact' }, `artifact ${x.path} (${bytes(x.bytes)})`));
    for (const rc of p.receipts || []) {
      const what = `${rc.type || rc.tool || 'side effect'} ${rc.key}`;
      items.push(rc.unknown
        ? h('li', { class: 'receipt unknown', dataset: { key: rc.key }, title: 'The process stopped between the intent and the result; it was not repeated. Check whether it happened, then resume the run with resend_unknown to send it again.' },
          `⚠ ${what} · outcome unknown`)
        : h('li', { class: 'receipt', dataset: { key: rc.key } }, `${what} · ${rc.state}`));
    }
    if (items.length) li.append(h('ul', {}, items));
    ol.append(li);
  }
  const guard = $('guardrails');
  guard.replaceChildren();
  if (b.learnings.length) {
    guard.append(h('div', { class: 'guard' }, h('h3', { text: 'Learnings' }),
      h('ul', {}, b.learnings.map((l) => h('li', {}, `${l.phase_id}: ${l.text}`)))));
  }
  if (b.guardrails.length) {
    guard.append(h('div', { class: 'guard' }, h('h3', { text: 'Guardrails' }),
      h('ul', {}, b.guardrails.map((g) => h('li', {}, `${g.phase_id} #${g.attempt} (${g.kind === 'failed_approach' ? 'failed approach' : 'verification'}): ${oneLine(g.text, 240)}`)))));
  }
}

function evidenceText(ev) {
  if (!ev?.type) return 'no evidence';
  switch (ev.type) {
    case 'artifact': return `evidence: ${(ev.artifacts || []).join(', ')}`;
    case 'receipt': return `evidence: receipt ${(ev.receipts || []).join(', ')}`;
    case 'hybrid': return `evidence: ${[...(ev.artifacts || []), ...(ev.receipts || [])].join(', ')}`;
    case 'programmatic': return `evidence: $ ${oneLine(ev.command, 60)}`;
  }
  return `evidence: ${ev.type}`;
}

function tickOne(el) {
  el.textContent = `running ${duration(Number(el.dataset.before || 0) + Date.now() - new Date(el.dataset.since).getTime())}`;
}
setInterval(() => document.querySelectorAll('.elapsed[data-since]').forEach(tickOne), 1000);

let checkpointTimer = null;
function scheduleCheckpoints() {
  clearTimeout(checkpointTimer);
  checkpointTimer = setTimeout(loadCheckpoints, 150);
}

async function loadCheckpoints() {
  const id = state.selectedRun;
  if (!id) return;
  try {
    const list = await gw.call('checkpoint.list', { run_id: id });
    if (state.selectedRun === id) renderCheckpoints(list.checkpoints || []);
  } catch {
    $('checkpoints-panel').hidden = true;
  }
}

function renderCheckpoints(cps) {
  $('checkpoints-panel').hidden = cps.length === 0;
  const info = state.runs.get(state.selectedRun) || {};
  const active = info.status === 'running' || info.status === 'queued' || info.status === 'waiting';
  const ul = $('checkpoints');
  ul.replaceChildren();
  for (const c of cps) {
    ul.append(h('li', { class: 'checkpoint', dataset: { number: c.number } },
      h('span', { class: 'badge', text: `#${c.number}` }),
      h('span', { class: 'path', text: c.path }),
      h('span', { class: 'muted small', text: c.existed ? bytes(c.bytes) : 'new file' }),
      h('button', {
        type: 'button', class: 'small danger rewind', disabled: active,
        title: active ? 'The run is still going; rewind it after it ends.' : `Put back the files changed at #${c.number} or later`,
        onclick: () => rewind(c, cps),
      }, 'Rewind')));
  }
}

async function rewind(c, cps) {
  const id = state.selectedRun;
  const files = cps.filter((x) => x.number >= c.number);
  const answer = await confirmDialog({
    title: `Rewind to checkpoint #${c.number}?`,
    text: `These files of run ${short(id)} go back to how they were before the run changed them; files it created are removed:`,
    list: files.map((x) => `${x.path}${x.existed ? '' : ' (remove)'}`),
    yes: 'Rewind files',
    force: true,
  });
  if (!answer) return;
  const out = $('rewind-result');
  out.replaceChildren(h('p', { class: 'muted small', text: 'Rewinding…' }));
  try {
    const rep = await gw.call('checkpoint.rewind', { run_id: id, to: c.number, force: answer.force });
    const files = rep.files || [];
    out.replaceChildren(h('p', { class: 'note', text: `Rewound to #${rep.to}: ${files.length} file${files.length === 1 ? '' : 's'}.` }),
      h('ul', {}, files.map((x) => h('li', { class: `rewound s-${x.outcome}`, dataset: { path: x.path, outcome: x.outcome } },
        `${x.outcome} ${x.path}${x.reason ? ': ' + x.reason : ''}`))));
  } catch (err) {
    out.replaceChildren(h('p', { class: 'error', text: err.message }));
  }
}

// ---- The inbox: runs that wait for a person (docs/PROTOCOL.md#waits) ----

// INBOX_POLL is how often the inbox is read again: a wait may start or be
// answered in a session this page does not follow, or by another process.
// Events of the sessions it follows refresh it at once.
const INBOX_POLL = 2000;
// CONTEXT_EVENTS is how many of a run's events before its wait are shown.
const CONTEXT_EVENTS = 12;

const inbox = { cards: new Map(), timer: null, active: false };

const waitKey = (w) => `${w.run_id}/${w.wait_id}`;

function scheduleInbox(delay) {
  clearTimeout(inbox.timer);
  inbox.timer = setTimeout(refreshInbox, delay);
}

async function refreshInbox() {
  clearTimeout(inbox.timer);
  if (!inbox.active) return;
  try {
    const list = await api('GET', '/v1/waiting');
    renderInbox(list.waits || []);
  } catch (err) {
    if (err.status === 401) {
      signedOut(err.message);
      return;
    }
  }
  if (inbox.active) inbox.timer = setTimeout(refreshInbox, INBOX_POLL);
}

function startInbox() {
  inbox.active = true;
  scheduleInbox(0);
}

function stopInbox() {
  inbox.active = false;
  clearTimeout(inbox.timer);
  renderInbox([]);
}

// renderInbox shows every open wait once: a card already shown stays as
// it is, so what someone is typing in it is kept; answered ones go.
function renderInbox(waits) {
  const box = $('inbox');
  const keep = new Set(waits.map(waitKey));
  for (const [k, card] of inbox.cards) {
    if (!keep.has(k)) {
      card.remove();
      inbox.cards.delete(k);
    }
  }
  for (const w of waits) {
    if (!inbox.cards.has(waitKey(w))) {
      const card = waitCard(w);
      inbox.cards.set(waitKey(w), card);
      box.append(card);
    }
  }
  $('inbox-panel').hidden = waits.length === 0;
  $('inbox-count').textContent = String(waits.length);
  document.title = waits.length ? `(${waits.length}) agent` : 'agent';
}

// waitCard is one wait: the run it stops and its prompt, what it waits
// for in full (the tool and its arguments, or the question and its
// options), the run's last events, and the answers it takes.
function waitCard(w) {
  const error = h('p', { class: 'error', role: 'alert', hidden: true });
  const card = h('article', { class: 'wait', role: 'listitem', dataset: { run: w.run_id, wait: w.wait_id, kind: w.kind } },
    h('div', { class: 'wait-head' },
      h('span', { class: 'badge s-waiting', text: w.kind }),
      h('button', { type: 'button', class: 'link mono', title: 'Open the run in its session', onclick: () => openRun(w.run_id) }, `run ${short(w.run_id)}`),
      w.phase_id ? h('span', { class: 'muted', text: `phase ${phaseName(w.phase_id)}` }) : null,
      h('span', { class: 'prompt-line', title: w.prompt, text: oneLine(w.prompt, 160) }),
      h('span', { class: 'muted small until', title: w.until, text: `until ${new Date(w.until).toLocaleString()}${w.on_timeout ? ', then ' + w.on_timeout : ''}` })),
    waitAsk(w));
  const actions = waitActions(w, card, error);
  if (actions) card.append(actions);
  card.append(error);
  const context = h('div', { class: 'ctx' }, h('p', { class: 'muted small', text: 'Loading the run’s last events…' }));
  card.append(h('details', { class: 'context', open: true }, h('summary', { text: 'What the run did before it asked' }), context));
  loadContext(w, context);
  return card;
}

function waitAsk(w) {
  switch (w.kind) {
    case 'approval': {
      let args = w.args;
      try {
        args = JSON.stringify(typeof w.args === 'string' ? JSON.parse(w.args) : w.args, null, 2);
      } catch {
        args = String(w.args ?? '');
      }
      return h('div', { class: 'ask' },
        h('div', {}, 'Run ', h('strong', { class: 'tool-name', text: w.tool }), w.rule ? h('span', { class: 'muted' }, ' (rule ', h('code', { text: w.rule }), ')') : null, '?'),
        h('pre', { class: 'args', text: args }));
    }
    case 'question':
      return h('div', { class: 'ask' }, h('p', { class: 'question', text: w.question }));
    case 'signal':
      return h('div', { class: 'ask' }, 'Waits for the signal ', h('code', { text: w.name }), '.');
  }
  return h('div', { class: 'ask' }, `Sleeps until ${new Date(w.until).toLocaleString()}${w.reason ? ` (${w.reason.replace('_', ' ')})` : ''}; it goes on by itself.`);
}

// waitActions are the answers a wait takes; none for a sleep.
function waitActions(w, card, error) {
  const post = (path, body, done) => async () => {
    for (const b of card.querySelectorAll('.actions button')) b.disabled = true;
    error.hidden = true;
    try {
      const res = await api('POST', path, body);
      card.dataset.state = 'answered';
      card.append(h('p', { class: 'outcome', role: 'status', text: done(res.resolution || {}) }));
      scheduleInbox(1500); // the card goes once the run has it
    } catch (err) {
      error.textContent = err.message;
      error.hidden = false;
      if (err.code === 'already_answered') card.dataset.state = 'answered';
      else for (const b of card.querySelectorAll('.actions button')) b.disabled = false;
      if (err.status === 401) signedOut(err.message);
    }
  };
  const answer = `/v1/runs/${encodeURIComponent(w.run_id)}/waits/${encodeURIComponent(w.wait_id)}`;
  switch (w.kind) {
    case 'approval': {
      const reason = h('input', { type: 'text', class: 'reason', 'aria-label': 'Why you deny it (the model is told)', placeholder: 'Reason, if you deny it (the model is told)', maxlength: 2000 });
      return h('div', { class: 'actions row' },
        h('button', { type: 'button', class: 'allow', onclick: post(answer, { decision: 'allow' }, () => 'Allowed: the run goes on.') }, 'Allow'),
        h('button', { type: 'button', class: 'allow-always', title: w.rule ? `Allow ${w.rule} for the rest of the run` : 'Allow this rule for the rest of the run',
          onclick: post(answer, { decision: 'allow', always: true }, () => `Allowed ${w.rule || 'the rule'} for the rest of the run: it goes on.`) }, 'Allow always'),
        reason,
        h('button', { type: 'button', class: 'danger deny', onclick: () => post(answer, { decision: 'deny', reason: reason.value.trim() }, () => 'Denied: the call does not run, and the model is told why.')() }, 'Deny'));
    }
    case 'question': {
      const text = h('input', { type: 'text', class: 'answer-text', 'aria-label': 'Your answer', placeholder: 'Your answer', maxlength: 20000 });
      const send = (v) => post(answer, { decision: 'answer', text: v }, () => 'Answered: the run goes on.')();
      const options = (w.options || []).map((o) => h('button', { type: 'button', class: 'option', onclick: () => send(o) }, o));
      text.addEventListener('keydown', (ev) => {
        if (ev.key === 'Enter' && text.value.trim()) send(text.value.trim());
      });
      return h('div', { class: 'actions row' }, options, text,
        h('button', { type: 'button', class: 'primary answer', onclick: () => text.value.trim() ? send(text.value.trim()) : text.focus() }, 'Answer'));
    }
    case 'signal': {
      const data = h('textarea', { class: 'signal-data', rows: 1, 'aria-label': `Data sent with ${w.name} (JSON, optional)`, placeholder: 'Data (JSON, optional)' });
      const path = `/v1/runs/${encodeURIComponent(w.run_id)}/signals/${encodeURIComponent(w.name)}`;
      return h('div', { class: 'actions row' }, data,
        h('button', { type: 'button', class: 'primary signal', onclick: () => {
          let body = null;
          try {
            body = data.value.trim() ? JSON.parse(data.value) : null;
          } catch {
            error.textContent = 'The data is not JSON.';
            error.hidden = false;
            return;
          }
          post(path, body, () => `Sent ${w.name}: the run goes on.`)();
        } }, 'Send signal'));
    }
  }
  return null;
}

// loadContext shows the run's last events before its wait, as the stream
// shows them, from the stored events (GET /v1/runs/ID/events ends at once
// for a run nobody drives).
async function loadContext(w, box) {
  const ctl = new AbortController();
  const stop = setTimeout(() => ctl.abort(), 5000);
  try {
    const after = Math.max(0, (w.seq || 0) - 4 * CONTEXT_EVENTS);
    const res = await fetch(`/v1/runs/${encodeURIComponent(w.run_id)}/events?after_seq=${after}`, { credentials: 'same-origin', signal: ctl.signal });
    const text = await res.text();
    const frames = [];
    for (const block of text.split('\n\n')) {
      const line = block.split('\n').find((l) => l.startsWith('data: '));
      if (!line) continue;
      try {
        const e = JSON.parse(line.slice(6));
        if (e.seq > w.seq || e.type === 'message.delta') continue;
        frames.push({ event: e.type, data: e.data, run_id: e.run_id, phase_id: e.phase_id, attempt: e.attempt, seq: e.seq });
      } catch {
        // not an event
      }
    }
    box.replaceChildren();
    if (!state.runs.has(w.run_id)) {
      state.runs.set(w.run_id, { run_id: w.run_id, session_id: w.session_id, status: 'waiting', kind: w.phase_id ? 'harness' : 'run', prompt: w.prompt });
    }
    const view = new View(box);
    for (const f of frames.slice(-CONTEXT_EVENTS)) view.apply(f);
    if (!frames.length) box.append(h('p', { class: 'muted small', text: 'No events before the wait.' }));
  } catch {
    box.replaceChildren(h('p', { class: 'muted small', text: 'The run’s events could not be read.' }));
  } finally {
    clearTimeout(stop);
  }
}

// ---- Scheduled jobs ----

let jobsTimer = null;
function scheduleJobs() {
  clearTimeout(jobsTimer);
  jobsTimer = setTimeout(() => refreshJobs().catch(() => {}), 300);
}

const openJobs = new Set();

async function refreshJobs() {
  if (!state.methods.has('job.list')) {
    $('jobs-section').hidden = true;
    return;
  }
  const list = await gw.call('job.list', {});
  const jobs = list.jobs || [];
  $('jobs-section').hidden = false;
  const ul = $('jobs');
  ul.replaceChildren();
  if (!jobs.length) ul.append(h('li', { class: 'muted small', text: 'No jobs. agent jobs create adds one.' }));
  for (const j of jobs) {
    const runs = h('ul', { class: 'job-runs', hidden: !openJobs.has(j.id) });
    const li = h('li', { dataset: { job: j.id } },
      h('button', {
        type: 'button', class: 'item',
        onclick: () => toggleJob(j, runs),
      },
      h('span', { class: 'title' }, j.name, ' ', h('span', { class: `badge s-${j.enabled ? 'on' : 'paused'}`, text: j.enabled ? 'on' : 'paused' })),
      h('span', { class: 'meta mono', text: `${j.cron_expr} · ${j.timezone || 'UTC'}` }),
      h('span', { class: 'meta next', text: j.enabled ? `next ${inZone(j.next_run_at, j.timezone)}` : 'paused' })),
      runs);
    ul.append(li);
    if (openJobs.has(j.id)) loadJobRuns(j, runs);
  }
}

function toggleJob(j, runs) {
  if (openJobs.has(j.id)) {
    openJobs.delete(j.id);
    runs.hidden = true;
    return;
  }
  openJobs.add(j.id);
  runs.hidden = false;
  loadJobRuns(j, runs);
}

async function loadJobRuns(j, ul) {
  try {
    const res = await gw.call('job.get_runs', { job_id: j.id, limit: 8 });
    ul.replaceChildren();
    if (!res.runs?.length) ul.append(h('li', { class: 'muted', text: 'No runs yet.' }));
    for (const r of res.runs || []) {
      ul.append(h('li', {},
        h('span', { class: `badge s-${r.status}`, text: r.status }),
        h('span', { text: inZone(r.scheduled_for, j.timezone) }),
        r.attempt > 1 ? h('span', { class: 'muted', text: `attempt ${r.attempt}` }) : null,
        r.run_id ? h('button', { type: 'button', onclick: () => openRun(r.run_id) }, short(r.run_id)) : null,
        r.error_text ? h('span', { class: 'muted', text: oneLine(r.error_text, 80) }) : null));
    }
  } catch (err) {
    ul.replaceChildren(h('li', { class: 'error', text: err.message }));
  }
}

async function openRun(runID) {
  try {
    const info = await gw.call('run.get', { run_id: runID });
    state.runs.set(info.run_id, info);
    // A job's run may be in a session the list has not seen yet.
    if (info.session_id) await refreshSessions();
    if (info.session_id) await selectSession(info.session_id);
    selectRun(info.run_id);
  } catch (err) {
    showError('start-error', err.message);
  }
}

// ---- Confirmation ----

// confirmDialog asks before something that cannot be taken back. It
// resolves to false, or to {force} when confirmed.
function confirmDialog({ title, text, list, yes, force }) {
  const dlg = $('confirm');
  $('confirm-title').textContent = title;
  $('confirm-text').textContent = text;
  $('confirm-list').replaceChildren(...(list || []).map((x) => h('li', { text: x })));
  $('confirm-force-row').hidden = !force;
  $('confirm-force').checked = false;
  $('confirm-yes').textContent = yes;
  return new Promise((resolve) => {
    const done = (answer) => {
      $('confirm-yes').onclick = null;
      $('confirm-no').onclick = null;
      dlg.onclose = null;
      if (dlg.open) dlg.close();
      resolve(answer);
    };
    $('confirm-yes').onclick = () => done({ force: $('confirm-force').checked });
    $('confirm-no').onclick = () => done(false);
    // Escape closes it. A close event still queued from the last time
    // finds the dialog open again, and is not an answer.
    dlg.onclose = () => {
      if (!dlg.open) done(false);
    };
    dlg.showModal();
    $('confirm-no').focus();
  });
}

// ---- Connection, sign-in, sign-out ----

// CONN_TEXT is what the badge says in each state.
const CONN_TEXT = { 'signed-out': 'not signed in' };

function setConn(s) {
  const el = $('conn');
  el.dataset.state = s;
  el.textContent = CONN_TEXT[s] || s;
}

async function onConnected(hello) {
  setConn('connected');
  state.methods = new Set(hello.methods || []);
  $('server').textContent = hello.server || '';
  if (hello.scheduling === false) {
    $('jobs-note').hidden = false;
    $('jobs-note').textContent = 'Scheduling is off in this gateway (start it with --scheduler): jobs do not fire.';
  }
  for (const st of state.streams.values()) st.attached = false;
  if (state.methods.has('wait.answer')) startInbox();
  try {
    await refreshSessions();
    const want = state.selected || sessionStorage.getItem('agent.selected');
    if (want) await selectSession(want);
    await refreshJobs();
  } catch (err) {
    if (err.code !== 'disconnected') showError('start-error', err.message);
  }
}

function onDisconnected() {
  for (const st of state.streams.values()) st.attached = false;
}

function showError(id, msg) {
  const el = $(id);
  el.textContent = msg;
  el.hidden = false;
}

function hideError(id) {
  $(id).hidden = true;
}

function showSignIn(error, note) {
  gw.stop();
  stopInbox();
  setConn('signed-out');
  $('app-view').hidden = true;
  $('session-main').hidden = true; // one <main> at a time: the sign-in's
  $('signout').hidden = true;
  $('signin-view').hidden = false;
  $('signin-error').hidden = !error;
  $('signin-error').textContent = error || '';
  $('signin-note').hidden = !note;
  $('signin-note').textContent = note || '';
  $('token').focus();
}

function showApp() {
  $('signin-view').hidden = true;
  $('app-view').hidden = false;
  $('session-main').hidden = false;
  $('signout').hidden = false;
  gw.start();
}

// signedOut is a refusal of the cookie: expired, signed out elsewhere,
// or a restarted gateway.
function signedOut(message) {
  showSignIn(message);
}

async function signIn(ev) {
  ev.preventDefault();
  const field = $('token');
  const token = field.value.trim();
  field.value = ''; // the page keeps no copy
  if (!token) return;
  $('signin-button').disabled = true;
  try {
    await api('POST', '/login', { token });
    showApp();
  } catch (err) {
    showSignIn(err.message);
  } finally {
    $('signin-button').disabled = false;
  }
}

async function signOut() {
  try {
    await api('POST', '/logout');
  } catch {
    // signed out already
  }
  saveAll();
  sessionStorage.clear();
  state.streams.clear();
  state.selected = null;
  state.selectedRun = null;
  renderStream();
  showSignIn('', 'Signed out.');
}

async function boot() {
  $('signin').addEventListener('submit', signIn);
  $('signout').addEventListener('click', signOut);
  $('start').addEventListener('submit', startRun);
  $('input').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.metaKey || ev.ctrlKey)) $('start').requestSubmit();
  });
  $('new-session').addEventListener('click', () => newSession().catch((err) => showError('start-error', err.message)));
  $('delete-session').addEventListener('click', deleteSession);
  $('resume').addEventListener('click', () => state.selectedRun && resumeRun(state.selectedRun));
  $('refresh').addEventListener('click', () => {
    refreshSessions().catch(() => {});
    refreshJobs().catch(() => {});
  });
  $('interrupt').addEventListener('click', () => stopRun('interrupt'));
  $('cancel').addEventListener('click', () => stopRun('cancel'));
  window.addEventListener('pagehide', saveAll);
  // GET /login answers 200 signed in or not: nothing is refused, so the
  // console logs no error before anyone signs in.
  try {
    const st = await api('GET', '/login');
    if (st.signed_in) showApp();
    else showSignIn(st.message || '');
  } catch (err) {
    showSignIn(err.message);
  }
}

boot();
