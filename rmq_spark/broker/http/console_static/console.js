// rocketlite's web console: reads the broker's JSON API (/api/...) and draws it.
// Every text from the broker goes into the page as a text node (never as markup).
"use strict";

(function () {
  const KEYS = "rocketlite.console.keys";   // sessionStorage: this tab only
  const REFRESH_MS = 5000;
  const state = {
    session: null,
    expanded: new Set(),   // "topic:NAME" and "group:NAME" rows opened
    timer: null,
    last: null,            // the topics and groups last drawn
  };

  // -- DOM helpers ---------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  // el("td", {class: "num"}, "text", child, ...): strings become text nodes
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === false || value === null || value === undefined) continue;
      if (name === "on") {
        for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
      } else {
        node.setAttribute(name, value === true ? "" : String(value));
      }
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    return node;
  }

  const num = (n) => Number(n).toLocaleString("en-US");
  const rate = (n) => Number(n).toLocaleString("en-US", {maximumFractionDigits: n < 10 ? 2 : 0});

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  }

  function duration(seconds) {
    if (seconds < 60) return `${Math.round(seconds)} s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
    if (seconds < 86400) return `${(seconds / 3600).toFixed(1)} h`;
    return `${(seconds / 86400).toFixed(1)} d`;
  }

  const time = (ms) => ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC") : "";

  function toast(text, isError) {
    const box = $("toast");
    box.textContent = text;
    box.classList.toggle("error", !!isError);
    box.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { box.hidden = true; }, 6000);
  }

  function confirmDialog(text) {
    return new Promise((resolve) => {
      $("confirm-text").textContent = text;
      $("confirm").hidden = false;
      const done = (answer) => {
        $("confirm").hidden = true;
        $("confirm-yes").onclick = $("confirm-no").onclick = null;
        resolve(answer);
      };
      $("confirm-yes").onclick = () => done(true);
      $("confirm-no").onclick = () => done(false);
      $("confirm-no").focus();   // Enter cancels; Escape too (below)
    });
  }

  // -- the API -------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function basic(access, secret) {
    // Basic credentials of UTF-8 text
    const raw = new TextEncoder().encode(`${access}:${secret}`);
    let text = "";
    for (const b of raw) text += String.fromCharCode(b);
    return "Basic " + btoa(text);
  }

  async function api(path, body) {
    const headers = {"X-Rocketlite-Console": "1"};   // also: no browser login dialog
    const keys = sessionStorage.getItem(KEYS);
    if (keys) headers.Authorization = keys;
    const init = {headers, credentials: "omit", cache: "no-store"};
    if (body !== undefined) {
      init.method = "POST";
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    let payload = null;
    const type = response.headers.get("content-type") || "";
    if (type.startsWith("application/json")) payload = await response.json();
    else payload = {error: (await response.text()).trim()};
    if (!response.ok) throw new ApiError(response.status, payload.error || response.statusText);
    return payload;
  }

  // -- sign in -------------------------------------------------------------------------

  async function start() {
    try {
      state.session = await api("/api/session");
    } catch (error) {
      if (error.status === 401) return showLogin(sessionStorage.getItem(KEYS) ? error.message : "");
      // not serving yet (recovering its store), or unreachable: say so and ask again
      $("login").hidden = true;
      let note = $("not-serving");
      if (!note) {
        note = el("p", {id: "not-serving", class: "card error"});
        document.body.append(note);
      }
      note.textContent = `The broker does not answer yet: ${error.message}. Trying again…`;
      setTimeout(start, 3000);
      return;
    }
    $("login").hidden = true;
    $("console").hidden = false;
    if ($("not-serving")) $("not-serving").remove();
    const s = state.session;
    $("broker-name").textContent = `${s.broker} · ${s.version}`;
    $("who").textContent = s.acl ? `${s.user}${s.admin ? " (admin)" : ""}` : "";
    $("sign-out").hidden = !s.acl;
    for (const node of document.querySelectorAll(".admin")) node.hidden = !s.admin;
    refresh();
    state.timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  }

  function showLogin(message) {
    sessionStorage.removeItem(KEYS);
    clearInterval(state.timer);
    $("console").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
  }

  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEYS, basic($("access-key").value, $("secret-key").value));
    $("secret-key").value = "";
    start();
  });

  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("confirm").hidden) $("confirm-no").click();
  });

  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(KEYS);
    location.reload();
  });

  // -- refresh -------------------------------------------------------------------------

  async function refresh() {
    try {
      // the queues of the topics shown open only (a broker may hold many thousands)
      const open = [...state.expanded].filter((k) => k.startsWith("topic:")).map((k) => k.slice(6));
      const [status, topics, groups, rates] = await Promise.all([
        api("/api/status"), api(`/api/topics?queues=${encodeURIComponent(open.join(","))}`),
        api("/api/groups"), api("/api/rates?minutes=15"),
      ]);
      drawStatus(status);
      drawTables(topics.topics, groups.groups, false);
      drawChart(rates.points);
    } catch (error) {
      if (error.status === 401) showLogin(error.message);
      else toast(`Refresh failed: ${error.message}`, true);
    }
  }

  function stat(label, value, sub, fraction) {
    return el("div", {class: "stat"},
      el("div", {class: "label"}, label),
      el("div", {class: "value"}, value),
      sub ? el("div", {class: "sub"}, sub) : null,
      fraction === undefined ? null
        : el("div", {class: "bar"}, barFill(fraction)));
  }

  function barFill(fraction) {
    const fill = el("div");
    fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
    return fill;
  }

  function drawStatus(s) {
    const pill = $("ready");
    pill.textContent = s.ready ? "ready" : "not ready";
    pill.title = s.reason;
    pill.className = "pill " + (s.ready ? "ok" : "bad");
    const used = s.disk.total_bytes - s.disk.free_bytes;
    const conns = Object.entries(s.connections);
    const cards = [
      stat("Readiness", s.ready ? "ready" : "not ready", s.reason),
      stat("Disk", `${bytes(s.disk.free_bytes)} free`,
        `${bytes(used)} of ${bytes(s.disk.total_bytes)} used${s.disk.full ? " · FULL" : ""}`,
        s.disk.total_bytes ? used / s.disk.total_bytes : 0),
      stat("Commit log", bytes(s.commitlog_bytes), `${num(s.queues)} queues`),
      stat("Flush", `${bytes(s.flush.behind_bytes)} behind`,
        `${s.flush.mode} · ${num(s.flush.count)} flushes · mean ${s.flush.mean_ms} ms · max ${s.flush.max_ms} ms`),
      stat("Connections", conns.length ? conns.map(([p, n]) => `${p} ${num(n)}`).join(" · ") : "—",
        "remoting connections; gRPC clients are not counted"),
      stat("Consumers", num(s.members), `${num(s.long_polls)} long polls held`),
      stat("Uptime", duration(s.uptime_s)),
    ];
    if (s.in_per_s !== undefined) {
      cards.push(stat("Messages / s (1 min)", `${rate(s.in_per_s)} in`, `${rate(s.out_per_s)} out`));
    }
    $("status").replaceChildren(...cards);
  }

  function toggle(key) {
    if (state.expanded.has(key)) state.expanded.delete(key);
    else state.expanded.add(key);
    if (key.startsWith("topic:") && state.expanded.has(key)) refresh();   // fetch its queues
    else if (state.last) drawTables(state.last.topics, state.last.groups, true);
  }

  // not while the user is busy with a form in a table, or answering a confirmation
  function drawTables(topics, groups, force) {
    const busy = !$("confirm").hidden || (document.activeElement && document.activeElement.closest &&
      document.activeElement.closest("#groups form"));
    state.last = {topics, groups};
    drawTopics(topics);
    if (force || !busy) drawGroups(groups, topics);
  }

  function drawTopics(topics) {
    const showSystem = $("show-system").checked;
    const rows = [];
    for (const t of topics) {
      if (t.system && !showSystem) continue;
      const key = `topic:${t.topic}`;
      const open = state.expanded.has(key);
      rows.push(el("tr", {class: "row", "data-topic": t.topic, on: {click: () => toggle(key)}},
        el("td", {}, el("span", {class: "caret"}, open ? "▾" : "▸"), t.topic,
          t.system ? el("span", {class: "tag"}, "system") : null),
        el("td", {}, t.message_type),
        el("td", {class: "num"}, `${t.read_queues} / ${t.write_queues}`),
        el("td", {}, permText(t.perm)),
        el("td", {class: "num", "data-messages": t.topic}, num(t.messages)),
        el("td", {class: "num"}, rate(t.in_per_s)),
        el("td", {class: "num"}, num(t.in_total))));
      if (open && t.queues) {
        rows.push(el("tr", {class: "detail"}, el("td", {colspan: 7},
          el("table", {class: "grid queues"},
            el("thead", {}, el("tr", {}, el("th", {}, "Queue"), el("th", {class: "num"}, "Min offset"),
              el("th", {class: "num"}, "Max offset"), el("th", {class: "num"}, "Messages"))),
            el("tbody", {}, t.queues.map((q) => el("tr", {"data-queue": `${t.topic}/${q.queue}`},
              el("td", {}, q.queue), el("td", {class: "num"}, num(q.min)),
              el("td", {class: "num"}, num(q.max)), el("td", {class: "num"}, num(q.max - q.min)))))))));
      }
    }
    if (!rows.length) rows.push(el("tr", {}, el("td", {colspan: 7, class: "muted"}, "No topics to show.")));
    $("topics").tBodies[0].replaceChildren(...rows);
  }

  function permText(perm) {
    return ({6: "read-write", 4: "read", 2: "write", 0: "none"})[perm] || String(perm);
  }

  function drawGroups(groups, topics) {
    const rows = [];
    for (const g of groups) {
      const key = `group:${g.group}`;
      const open = state.expanded.has(key);
      rows.push(el("tr", {class: "row", "data-group": g.group, on: {click: () => toggle(key)}},
        el("td", {}, el("span", {class: "caret"}, open ? "▾" : "▸"), g.group),
        el("td", {class: "num"}, num(g.members.length)),
        el("td", {class: "num" + (g.lag > 1000 ? " lag-high" : ""), "data-lag": g.group}, num(g.lag)),
        el("td", {class: "num"}, rate(g.out_per_s))));
      if (open) rows.push(el("tr", {class: "detail"}, el("td", {colspan: 4}, groupDetail(g, topics))));
    }
    if (!groups.length) rows.push(el("tr", {}, el("td", {colspan: 4, class: "muted"}, "No consumer groups yet.")));
    $("groups").tBodies[0].replaceChildren(...rows);
  }

  function groupDetail(g, topics) {
    const parts = [];
    parts.push(el("h3", {class: "small"}, "Members"));
    if (!g.members.length) parts.push(el("p", {class: "muted"}, "No live members."));
    else parts.push(el("table", {class: "grid members"},
      el("thead", {}, el("tr", {}, el("th", {}, "Client"), el("th", {}, "Type"), el("th", {}, "Model"),
        el("th", {}, "Subscriptions"))),
      el("tbody", {}, g.members.map((m) => el("tr", {},
        el("td", {}, m.client_id), el("td", {}, m.protocol ? `${m.consume_type} (${m.protocol})` : m.consume_type),
        el("td", {}, m.message_model),
        el("td", {}, m.subscriptions.map((s) => `${s.topic}: ${s.expression}${s.type !== "TAG" ? ` (${s.type})` : ""}`).join("; ")))))));
    parts.push(el("h3", {class: "small"}, "Lag per queue"));
    if (!g.queues.length) parts.push(el("p", {class: "muted"}, "No committed offsets."));
    else parts.push(el("table", {class: "grid lags"},
      el("thead", {}, el("tr", {}, ["Topic", "Queue", "Committed", "Max offset", "Lag", "In flight", "Ready", "Oldest waiting"]
        .map((h, i) => el("th", {class: i ? "num" : ""}, h)))),
      el("tbody", {}, g.queues.map((q) => el("tr", {"data-lag-queue": `${g.group}/${q.topic}/${q.queue}`},
        el("td", {}, q.topic), el("td", {class: "num"}, q.queue), el("td", {class: "num"}, num(q.committed)),
        el("td", {class: "num"}, num(q.max)), el("td", {class: "num"}, num(q.lag)),
        el("td", {class: "num"}, num(q.inflight)), el("td", {class: "num"}, num(q.ready)),
        el("td", {class: "num"}, q.lag ? duration(q.lag_ms / 1000) : "—"))))));
    if (state.session.admin) parts.push(resetForm(g, topics));
    return el("div", {on: {click: (event) => event.stopPropagation()}}, parts);
  }

  function resetForm(g, topics) {
    const names = [...new Set([...g.queues.map((q) => q.topic),
      ...g.members.flatMap((m) => m.subscriptions.map((s) => s.topic))])];
    if (!names.length) names.push(...topics.filter((t) => !t.system).map((t) => t.topic));
    const topic = el("select", {class: "reset-topic"}, names.map((n) => el("option", {value: n}, n)));
    const to = el("select", {class: "reset-to"},
      el("option", {value: "earliest"}, "earliest"), el("option", {value: "latest"}, "latest"),
      el("option", {value: "time"}, "a time"));
    const when = el("input", {type: "datetime-local", class: "reset-time", hidden: true, step: 1});
    to.addEventListener("change", () => { when.hidden = to.value !== "time"; });
    const form = el("form", {class: "inline admin reset"},
      el("strong", {}, "Reset offsets"), topic, "to", to, when,
      el("button", {type: "submit", class: "danger"}, "Reset…"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = {group: g.group, topic: topic.value, to: to.value};
      let where = to.value;
      if (to.value === "time") {
        const ms = when.valueAsNumber;   // the local time as if UTC: correct it
        if (Number.isNaN(ms)) return toast("Pick a time to reset to.", true);
        body.timestamp_ms = ms + new Date(ms).getTimezoneOffset() * 60000;
        where = time(body.timestamp_ms);
      }
      const ok = await confirmDialog(`Reset group ${g.group}'s offsets of ${body.topic} to ${where}? ` +
        "Members that are running may commit their own positions over it.");
      if (!ok) return;
      try {
        const answer = await api("/api/groups/reset", body);
        toast(`Offsets of ${answer.group} on ${answer.topic}: ${JSON.stringify(answer.offsets)}`);
        refresh();
      } catch (error) {
        toast(`Reset refused: ${error.message}`, true);
      }
    });
    return form;
  }

  // -- chart ---------------------------------------------------------------------------

  function drawChart(points) {
    const box = $("chart");
    if (points.length < 2) {
      box.replaceChildren(el("p", {class: "muted"}, "Collecting samples: one every 10 s."));
      return;
    }
    const W = 800, H = 220, L = 52, R = 10, T = 10, B = 24;
    const t0 = points[0][0], t1 = points[points.length - 1][0];
    let top = Math.max(1, ...points.map((p) => Math.max(p[1], p[2])));
    const magnitude = Math.pow(10, Math.floor(Math.log10(top)));
    top = Math.ceil(top / magnitude) * magnitude;
    const x = (t) => L + (t1 === t0 ? 0 : (t - t0) / (t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    const chart = svg("svg", {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img",
      "aria-label": "messages in and out per second"});
    for (const f of [0, 0.5, 1]) {
      chart.append(svg("line", {class: "axis", x1: L, x2: W - R, y1: y(top * f), y2: y(top * f)}));
      const label = svg("text", {x: L - 6, y: y(top * f) + 4, "text-anchor": "end"});
      label.textContent = rate(top * f);
      chart.append(label);
    }
    for (const t of [t0, (t0 + t1) / 2, t1]) {
      const label = svg("text", {x: x(t), y: H - 6, "text-anchor": t === t0 ? "start" : t === t1 ? "end" : "middle"});
      label.textContent = new Date(t * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
      chart.append(label);
    }
    for (const [index, cls] of [[1, "in"], [2, "out"]]) {
      chart.append(svg("polyline", {class: cls,
        points: points.map((p) => `${x(p[0]).toFixed(1)},${y(p[index]).toFixed(1)}`).join(" ")}));
    }
    const last = points[points.length - 1];
    box.replaceChildren(chart, el("div", {class: "legend"},
      el("span", {class: "in"}, "━ in "), `${rate(last[1])}/s   `,
      el("span", {class: "out"}, "━ out "), `${rate(last[2])}/s`));
  }

  // -- look-up -------------------------------------------------------------------------

  const LOOKUP_FIELDS = {id: ["lookup-id"], key: ["lookup-topic", "lookup-key"],
    offset: ["lookup-topic", "lookup-queue", "lookup-offset"]};

  $("lookup-by").addEventListener("change", () => {
    const wanted = LOOKUP_FIELDS[$("lookup-by").value];
    for (const id of ["lookup-id", "lookup-topic", "lookup-key", "lookup-queue", "lookup-offset"]) {
      $(id).hidden = !wanted.includes(id);
    }
  });

  $("lookup").addEventListener("submit", async (event) => {
    event.preventDefault();
    const by = $("lookup-by").value;
    const query = new URLSearchParams();
    if (by === "id") query.set("id", $("lookup-id").value.trim());
    else query.set("topic", $("lookup-topic").value.trim());
    if (by === "key") query.set("key", $("lookup-key").value);
    if (by === "offset") {
      query.set("queue", $("lookup-queue").value);
      query.set("offset", $("lookup-offset").value);
    }
    const result = $("lookup-result");
    try {
      const answer = await api(`/api/message?${query}`);
      if (!answer.messages.length) {
        result.replaceChildren(el("p", {class: "muted", "data-found": 0}, "No message found."));
        return;
      }
      result.replaceChildren(...answer.messages.map(messageView),
        answer.more ? el("p", {class: "muted"}, "More messages match; the newest are shown.") : "");
    } catch (error) {
      result.replaceChildren(el("p", {class: "error"}, error.message));
    }
  });

  function messageView(m) {
    const facts = [
      ["Topic", m.topic], ["Queue", m.queue], ["Queue offset", m.queue_offset],
      ["Message id (offset)", m.msg_id], ["Unique key", m.unique_key], ["Tags", m.tags],
      ["Keys", m.keys], ["Stored", time(m.stored_ms)], ["Born", time(m.born_ms)],
      ["Born host", m.born_host], ["Store host", m.store_host],
      ["Reconsume times", m.reconsume_times],
    ];
    const body = m.body;
    const what = body.kind === "text" ? "text" : body.kind === "compressed" ? "compressed, shown as hex" : "binary, shown as hex";
    return el("div", {class: "message", "data-message": m.msg_id},
      el("dl", {}, facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v === "" ? "—" : v)])),
      el("h3", {class: "small"}, "Properties"),
      el("table", {class: "grid properties"}, el("tbody", {},
        Object.entries(m.properties).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v))))),
      el("h3", {class: "small"}, `Body: ${num(body.size)} bytes, ${what}` +
        (body.shown < body.size ? ` (first ${num(body.shown)})` : "")),
      el("pre", {class: "body"}, body.text));
  }

  $("show-system").addEventListener("change", () => {
    if (state.last) drawTopics(state.last.topics);
  });

  // -- changes -------------------------------------------------------------------------

  $("create-topic").addEventListener("submit", async (event) => {
    event.preventDefault();
    const topic = $("new-topic").value.trim();
    const queues = Number($("new-queues").value);
    if (!(await confirmDialog(`Create topic ${topic} with ${queues} queues?`))) return;
    try {
      const answer = await api("/api/topics", {topic, queues});
      toast(`Topic ${answer.topic} created (${answer.queues} queues).`);
      $("new-topic").value = "";
      refresh();
    } catch (error) {
      toast(`Not created: ${error.message}`, true);
    }
  });

  start();
})();
