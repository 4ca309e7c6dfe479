// The dashboard: polls the daemon's /dashboard/state and draws it. Read-only; every word it
// shows is the daemon's (the same sentences `orchestrator status` prints), and every piece of
// data goes into the page as text, never as markup.
"use strict";

const PERIOD_MS = 2000;
const STALE_AFTER_MS = 3 * PERIOD_MS + 1000;
const TOKEN_KEY = "orchestrator-token";

let token = takeToken();
let lastOk = null;
let polls = 0;

// A token given in the address (#token=...) is kept for this tab and taken out of the address
// bar at once; it never reaches the server in a URL.
function takeToken() {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function get(path) {
  const headers = token ? { Authorization: "Bearer " + token } : {};
  return fetch(path, { headers, cache: "no-store" });
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function when(epoch) {
  if (epoch === null || epoch === undefined) return "-";
  return new Date(epoch * 1000).toLocaleString([], {
    month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", hourCycle: "h23",
  });
}

function title(sweep, meta) {
  return el("div", { class: "title" },
    el("span", { class: "name" }, sweep.name),
    el("span", { class: "state " + sweep.state }, sweep.stopping ? sweep.state + " (stopping: " + sweep.stopping + ")" : sweep.state),
    el("span", { class: "meta" }, meta));
}

function fraction(progress) {
  if (progress.trials_planned) return progress.trials_begun / progress.trials_planned;
  const capped = progress.restarts.filter((r) => r.cap);
  if (!capped.length) return null;
  const used = capped.reduce((sum, r) => sum + r.used, 0);
  return used / capped.reduce((sum, r) => sum + r.cap, 0);
}

function hostsTable(hosts) {
  const rows = hosts.map((host) => el("tr", { "data-host": host.name },
    el("td", {}, host.name),
    el("td", { class: "config" }, host.config || "-"),
    el("td", { class: "num" }, host.trial),
    el("td", { class: "step" }, host.finished ? "finished" : host.step),
    el("td", { class: "num points" }, host.total ? host.done + "/" + host.total : "-")));
  return el("table", { class: "hosts" },
    el("thead", {}, el("tr", {},
      el("th", {}, "host"), el("th", {}, "config"), el("th", {}, "trial"),
      el("th", {}, "step"), el("th", {}, "points"))),
    el("tbody", {}, ...rows));
}

function running(sweep) {
  const by = sweep.daemon ? " · daemon " + sweep.daemon : "";
  const card = el("div", { class: "sweep", "data-sweep": sweep.name, "data-id": sweep.id },
    title(sweep, "id " + sweep.id + " · started " + when(sweep.started_at) + by));
  const progress = sweep.progress;
  if (!progress || !sweep.words) {
    card.append(el("p", { class: "empty" }, sweep.daemon
      ? "run by another daemon: its own dashboard shows the progress"
      : "in the store as running, not run by this daemon (it resumes here next)"));
    return card;
  }
  const words = sweep.words;
  card.append(el("p", { class: "progress", "data-done": words.done },
    el("span", { class: "label" }, "progress: "), words.done + "; " + words.eta));
  const share = fraction(progress);
  if (share !== null) {
    card.append(el("div", { class: "bar" },
      el("span", { style: "width: " + Math.min(100, 100 * share).toFixed(1) + "%" })));
  }
  const objective = words.best_by ? " (" + words.best_by + ")" : "";
  card.append(el("p", { class: "best" }, el("span", { class: "label" }, "best so far" + objective + ": "), words.best));
  card.append(progress.hosts.length ? hostsTable(progress.hosts) : el("p", { class: "empty" }, "no host has reported yet"));
  return card;
}

function queued(sweep, index) {
  const place = index === 0 ? "next" : "#" + (index + 1) + " in line";
  return el("div", { class: "sweep", "data-sweep": sweep.name, "data-id": sweep.id },
    title(sweep, place + " · priority " + sweep.priority + " · submitted " + when(sweep.submitted_at)));
}

function reportLink(text, path) {
  const href = new URL(".." + path, location.href).href;
  const link = el("a", { href, target: "_blank", rel: "noopener" }, text);
  link.addEventListener("click", async (event) => {
    if (!token) return; // a listener without a token: the plain link works
    event.preventDefault();
    const opened = window.open("", "_blank"); // now, in the click: a later open is a pop-up
    const response = await get(href);
    const blob = new Blob([await response.text()], { type: response.headers.get("Content-Type") || "text/plain" });
    const url = URL.createObjectURL(blob);
    if (opened) opened.location = url;
    else location.assign(url);
  });
  return link;
}

function ended(sweep) {
  const counts = Object.entries(sweep.trials).map(([state, n]) => n + " " + state).join(", ");
  const card = el("div", { class: "sweep", "data-sweep": sweep.name, "data-id": sweep.id },
    title(sweep, "id " + sweep.id + " · finished " + when(sweep.finished_at) + " · trials: " + (counts || "none")));
  if (sweep.error) card.append(el("p", { class: "error" }, sweep.error));
  for (const answer of sweep.answers) {
    card.append(el("p", { class: "answer " + answer.verdict, "data-host-type": answer.host_type },
      el("span", { class: "type" }, answer.host_type), answer.headline));
  }
  if (!sweep.answers.length) card.append(el("p", { class: "empty" }, "no answer"));
  card.append(el("p", { class: "reports" },
    reportLink("report (HTML)", sweep.reports.html), reportLink("report (Markdown)", sweep.reports.md)));
  return card;
}

function fill(id, items, draw, nothing) {
  const box = document.querySelector("#" + id + " .sweeps");
  const cards = items.map(draw);
  box.replaceChildren(...(cards.length ? cards : [el("p", { class: "empty" }, nothing)]));
}

function render(board) {
  fill("running", board.running, running, "no sweep is running");
  fill("queue", board.queued, queued, "the queue is empty");
  fill("ended", board.ended, ended, "no sweep has ended yet");
  const status = document.getElementById("status");
  status.className = "status";
  status.dataset.polls = String(polls);
  status.textContent = "daemon " + board.version + " · updated " + board.clock;
}

function stale(reason) {
  if (lastOk !== null && Date.now() - lastOk < STALE_AFTER_MS) return;
  const status = document.getElementById("status");
  status.className = "status stale";
  status.textContent = "no answer from the daemon" + (lastOk ? " since " + new Date(lastOk).toLocaleTimeString() : "") + " (" + reason + ")";
}

function askToken() {
  const form = document.getElementById("token-form");
  form.hidden = false;
  stale(token ? "the token was refused" : "a token is needed");
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  token = document.getElementById("token").value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  event.target.hidden = true;
  poll();
});

async function poll() {
  try {
    const response = await get("state");
    if (response.status === 401) {
      askToken(); // polling resumes once a token is given
      return;
    }
    if (!response.ok) throw new Error("HTTP " + response.status);
    const board = await response.json();
    polls += 1;
    lastOk = Date.now();
    render(board);
  } catch (error) {
    stale(error.message);
  }
  setTimeout(poll, PERIOD_MS);
}

poll();
