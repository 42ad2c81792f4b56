// The study page (our own code: no library, no network beyond this server's /api/).
// window.AIR = {mode: "live" | "file", canStop, inline: {studies, study, patches}}.
"use strict";
(function () {
  const AIR = window.AIR || { mode: "live" };
  const app = document.getElementById("app");
  const POLL_MS = 1000;
  const ui = { sort: "n", asc: true, filter: "", status: "", selected: null, version: null, scrollTop: 0 };
  let current = null;
  if (/[?&]token=/.test(location.search)) history.replaceState(null, "", location.pathname);

  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const num = (v, d = 5) => (v == null || v === "" ? "" : typeof v === "number" ? +v.toPrecision(d) + "" : esc(v));
  const usd = (v) => (v == null ? "" : "$" + (v < 1 ? v.toFixed(4) : v.toFixed(2)));
  const dur = (s) => (s == null ? "" : s < 90 ? s.toFixed(1) + " s" : s < 5400 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(2) + " h");
  const studyKey = () => {
    if (AIR.mode === "file") return AIR.inline.study ? AIR.inline.study.key : null;
    const m = location.pathname.match(/^\/studies\/([^/]+)/);
    return m ? decodeURIComponent(m[1]) : null;
  };

  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-cache", credentials: "same-origin" });
    if (!r.ok) throw new Error((await r.text()) || r.statusText);
    return r.json();
  }

  // --- the studies list --------------------------------------------------------------------
  function renderList(studies) {
    const rows = studies.map((s) => s.error
      ? `<tr><td>${esc(s.key)}</td><td colspan=6 class=note>${esc(s.error)}</td></tr>`
      : `<tr class=study><td><a href="/studies/${encodeURIComponent(s.key)}">${esc(s.name)}</a></td>
         <td><span class="badge ${esc(s.state)}">${esc(s.state)}</span></td>
         <td>${s.trials_done} / ${s.trials_budget}</td>
         <td>${num(s.best)} <span class=muted>${esc(s.metric)} (${esc(s.direction)})</span></td>
         <td>${usd(s.usd)}</td><td class=muted>${esc(s.study_dir)}</td></tr>`).join("");
    app.innerHTML = `<h1>Studies</h1>
      <table id=studies><thead><tr><th>study</th><th>state</th><th>trials done / budget</th>
      <th>best</th><th>cost so far</th><th>folder</th></tr></thead><tbody>${rows ||
      "<tr><td colspan=6 class=muted>no studies found</td></tr>"}</tbody></table>`;
  }

  // --- the best-so-far chart (SVG) -----------------------------------------------------------
  // each trial as the chart draws it: [n, value, kind] (kind: p pruned, b a baseline run,
  // k kept, o other; an "x" after it: failed). A big study's first screen brings them so.
  const kindOf = (t) => (t.status === "PRUNED" ? "p" : t.source === "baseline" || t.source === "noise" ? "b"
    : t.decision === "keep" ? "k" : "o") + (t.status === "FAILED" ? "x" : "");
  const COLOUR = { p: "#ea580c", b: "#6b7280", k: "#16a34a", o: "#2563eb" };

  function chart(v) {
    const W = 760, H = 300, L = 56, R = 12, T = 12, B = 28;
    const marks = v.points || v.trials.map((t) => [t.n, t.value, kindOf(t)]);
    const pts = marks.filter((m) => m[1] != null && isFinite(m[1]));
    if (!pts.length) return `<p class=muted>no trial has reported ${esc(v.objective.metric)} yet</p>`;
    const band = v.noise.floor || 0;
    // the best so far as its steps: a point where it changes (1,000 trials: ~10 points, not
    // 1,000, and a path of ~60 numbers to parse, lay out and paint, not ~8,000)
    const line = v.best_so_far.filter((p, i, all) => !i || p[1] !== all[i - 1][1]);
    let y0 = Infinity, y1 = -Infinity, n = 1;
    for (const m of pts) { y0 = Math.min(y0, m[1]); y1 = Math.max(y1, m[1]); }
    for (const p of line) { y0 = Math.min(y0, p[1] - band); y1 = Math.max(y1, p[1] + band); }
    for (const m of marks) n = Math.max(n, m[0]);
    if (y0 === y1) { y0 -= 1; y1 += 1; }
    const r1 = (z) => Math.round(z * 10) / 10; // a tenth of a unit: finer than a pixel
    const X = (x) => r1(L + (x / n) * (W - L - R)), Y = (y) => r1(T + (1 - (y - y0) / (y1 - y0)) * (H - T - B));
    let s = `<svg id=chart viewBox="0 0 ${W} ${H}" width="100%" role=img aria-label="objective per trial" data-x0=${L} data-x1=${W - R} data-w=${W} data-n=${n}>`;
    for (let i = 0; i <= 4; i++) {
      const y = y0 + (i / 4) * (y1 - y0);
      s += `<line x1=${L} x2=${W - R} y1=${Y(y)} y2=${Y(y)} stroke="#eee"/><text x=${L - 6} y=${Y(y) + 4} text-anchor=end>${num(y, 4)}</text>`;
    }
    s += `<text x=${(W + L) / 2} y=${H - 6} text-anchor=middle>trial</text>`;
    if (line.length) {
      const d = [], up = [], down = [];
      line.forEach(([x, y], i) => {
        const nx = i + 1 < line.length ? line[i + 1][0] : n;
        d.push(`${i ? "L" : "M"}${X(x)},${Y(y)}L${X(nx)},${Y(y)}`);
        up.push(`${i ? "L" : "M"}${X(x)},${Y(y + band)}L${X(nx)},${Y(y + band)}`);
        down.push(`L${X(nx)},${Y(y - band)}L${X(x)},${Y(y - band)}`);
      });
      if (band > 0) s += `<path class=band d="${up.join("")}${down.reverse().join("")}Z" fill="#16a34a" fill-opacity=0.12 />`;
      s += `<path class=best d="${d.join("")}" fill=none stroke="#16a34a" stroke-width=2 />`;
    }
    // the dots as one path per colour, each a circle of two arcs: 1,000 trials are a handful
    // of elements to lay out and paint, not 1,000; filled, not stroked with round caps (a
    // stroker's pass in the raster of every tile they cross)
    const dots = {}, r = marks.length > 300 ? 2 : 3.5, arc = `a${r},${r} 0 1,0 `;
    for (const [x, y, k] of pts) (dots[COLOUR[k[0]]] ||= []).push(`M${r1(X(x) - r)},${Y(y)}${arc}${2 * r},0${arc}${-2 * r},0`);
    for (const [c, d] of Object.entries(dots))
      s += `<path class=pts data-count=${d.length} d="${d.join("")}" fill="${c}" />`;
    const failed = marks.filter((m) => m[2].endsWith("x"));
    if (failed.length)
      s += `<path class=failed data-count=${failed.length} d="${failed.map(([x]) => `M${r1(X(x) - 4)},${H - B}L${r1(X(x) + 4)},${H - B}L${X(x)},${H - B - 7}Z`).join("")}" fill="#dc2626" />`;
    return s + "</svg><div id=charttip class=muted>&nbsp;</div><div class=muted>dots: trials (green: kept, grey: baseline runs, orange: pruned, red: failed) · line: best so far · band: noise floor</div>";
  }

  function spark(curve) {
    if (!curve || curve.length < 2) return `<span class=muted>no metric yet</span>`;
    const W = 220, H = 48, xs = curve.map((p) => p[0]), ys = curve.map((p) => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1, y0 = Math.min(...ys), y1 = Math.max(...ys);
    const X = (x) => 2 + ((x - x0) / (x1 - x0 || 1)) * (W - 4), Y = (y) => 2 + (1 - (y - y0) / (y1 - y0 || 1)) * (H - 4);
    const d = curve.map((p, i) => `${i ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    return `<svg class=curve width=${W} height=${H}><path d="${d}" fill=none stroke="#2563eb" stroke-width=1.5 /></svg> <span class=muted>${num(ys[ys.length - 1], 4)} @ ${num(xs[xs.length - 1])}</span>`;
  }

  function diffHtml(text) {
    return esc(text).split("\n").map((l) => {
      const c = l.startsWith("+++") || l.startsWith("---") || l.startsWith("diff ") ? "file" : l.startsWith("@@") ? "hunk" : l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : "";
      return c ? `<span class=${c}>${l}</span>` : l;
    }).join("\n");
  }

  // --- the study page ----------------------------------------------------------------------
  function skeleton(v) {
    drawn = { html: null, above: 0, below: 0 }; // a new table
    app.innerHTML = `<p>${AIR.mode === "live" ? '<a href="/">← all studies</a>' : ""}</p>
      <h1 id=title></h1><div id=notes></div><div class=cards id=cards></div>
      <div class=grid2><div class=panel id=chartbox></div>
        <div><div class=panel><b>Budget</b><div id=budget></div></div>
        <div class=panel style="margin-top:12px"><b>GPUs in use</b><div id=gpus></div></div></div></div>
      <h2>Running trials</h2><div id=running class=panel></div>
      <h2>Trials</h2><div class=filters><input id=filter placeholder="filter: text in any column" size=36>
        <select id=status><option value="">every status</option><option>SUCCEEDED</option><option>RUNNING</option>
        <option>PRUNED</option><option>FAILED</option><option>CANCELLED</option><option>PROPOSED</option></select>
        <span id=shown class=muted></span></div>
      <div class=table-wrap><table id=trials><thead><tr>${COLS.map(([k, h]) => `<th data-k=${k}>${h}</th>`).join("")}</tr></thead><tbody></tbody></table></div>
      <div id=detail></div>
      <h2>Code lineage</h2><div id=lineage class=panel></div>`;
    const f = document.getElementById("filter"), st = document.getElementById("status");
    f.value = ui.filter; st.value = ui.status;
    f.addEventListener("input", () => { ui.filter = f.value.toLowerCase(); renderTable(current); });
    st.addEventListener("change", () => { ui.status = st.value; renderTable(current); });
    document.querySelector("#trials thead").addEventListener("click", (e) => {
      const k = e.target.dataset.k; if (!k) return;
      ui.asc = ui.sort === k ? !ui.asc : true; ui.sort = k; renderTable(current);
    });
    let pending = false;
    document.querySelector(".table-wrap").addEventListener("scroll", () => {
      if (!pending) {
        pending = true;
        requestAnimationFrame(() => { pending = false; ui.scrollTop = document.querySelector(".table-wrap").scrollTop; drawWindow(); });
      }
    });
    document.getElementById("chartbox").addEventListener("mousemove", (e) => {
      const svg = e.target.closest && e.target.closest("svg#chart"), tip = document.getElementById("charttip");
      if (!svg || !tip) return;
      const d = svg.dataset, box = svg.getBoundingClientRect(); // the trial under the pointer
      const x = ((e.clientX - box.left) * d.w) / box.width;
      const n = Math.round(((x - d.x0) / (d.x1 - d.x0)) * d.n);
      const t = current.trials.find((x) => x.n === n);
      tip.textContent = t ? `trial ${t.n}: ${t.value == null ? t.status : num(t.value)} ${t.diff_text}` : "\u00a0";
    });
    document.querySelector("#trials tbody").addEventListener("click", (e) => {
      const tr = e.target.closest("tr.trial"); if (!tr || e.target.tagName === "A") return;
      ui.selected = +tr.dataset.n; renderTable(current); showTrial(ui.selected);
    });
  }

  const COLS = [["n", "#"], ["source", "source"], ["diff_text", "config diff"], ["patch", "patch"], ["status", "status"],
    ["value", "value ± std"], ["decision", "decision"], ["duration_s", "duration"], ["usd", "cost"], ["hardware", "hardware"], ["mlflow", "MLflow"]];

  function patchText(t) {
    const p = t.patch_summary;
    if (!p) return t.code ? "(parent's code)" : "";
    return `${Object.keys(p.files || {}).length} file(s) +${p.added || 0} −${p.removed || 0}`;
  }

  const rowHtml = (t) => `<tr class="trial${t.decision === "keep" ? " keep" : ""}${t.n === ui.selected ? " selected" : ""}${t.code ? " code" : ""}" data-n=${t.n}>
      <td elementtiming=trial-row>${t.n}</td><td>${esc(t.source)}</td><td title="${esc(t.diff_text)}">${esc(t.diff_text)}</td><td>${esc(patchText(t))}</td>
      <td><span class="badge s-${esc(t.status)}">${esc(t.status)}</span></td>
      <td>${num(t.value)}${t.std != null ? ` ± ${num(t.std, 3)} <span class=muted>(${t.seeds} seeds)</span>` : ""}</td>
      <td title="${esc(t.reason || "")}">${esc(t.decision || "")}${t.reason ? ` <span class=muted>${esc(t.reason)}</span>` : ""}</td>
      <td>${dur(t.duration_s)}</td><td title="GPU-h ${num(t.gpu_hours, 3)}, LLM ${usd(t.llm_usd)}">${usd(t.usd)}</td>
      <td>${esc(t.hardware)}</td><td>${t.mlflow ? `<a href="${esc(t.mlflow)}" target=_blank rel=noopener>run</a>` : ""}</td></tr>`;

  // The table draws only the rows in view (one line each): 1,000 trials cost what 30 do. Each
  // row drawn costs layout and paint on the first screen: a few beyond the view, not 15.
  // Until the first screen is painted, only the rows the window shows (below the chart on a
  // laptop's screen: a few): the rest of the view's rows are drawn right after that paint.
  const BUFFER_ROWS = 5, VIEW_PX = 520; // .table-wrap's max-height in study.css
  let tableRows = [], rowH = 28, measured = false; // 28 px: the CSS's row height
  let firstRows = 6; // made right in the first frame, once the table's place is known
  let drawn = { html: null, above: 0, below: 0 }; // the rows in the table's body now

  function renderTable(v) {
    const key = ui.sort;
    let rows = v.trials.filter((t) => (!ui.status || t.status === ui.status) &&
      (!ui.filter || [t.n, t.source, t.diff_text, t.status, t.decision, t.reason, t.hardware, t.rationale].join(" ").toLowerCase().includes(ui.filter)));
    const val = (t) => (key === "patch" ? patchText(t) : t[key]);
    rows.sort((a, b) => {
      const x = val(a), y = val(b);
      const c = x == null ? 1 : y == null ? -1 : typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return ui.asc ? c : -c;
    });
    document.getElementById("shown").textContent = v.trials_total // a first screen: the rest comes
      ? `the first ${rows.length} of ${v.trials_total} trials (loading the rest)` : `${rows.length} of ${v.trials.length} trials`;
    document.querySelectorAll("#trials th").forEach((th) => { th.className = th.dataset.k === key ? "sorted" + (ui.asc ? " asc" : "") : ""; });
    tableRows = rows;
    drawWindow();
    window.AIR_ROWS_DONE = { n: rows.length, at_ms: performance.now() };
  }

  function drawWindow() {
    const wrap = document.querySelector(".table-wrap"), body = document.querySelector("#trials tbody");
    if (!wrap || !body) return;
    // the scroll offset as last read while the layout was clean, and the view's CSS height:
    // reading them here, after the chart was redrawn, would force a layout of the whole page
    const inView = Math.ceil(VIEW_PX / rowH);
    const first = Math.max(0, Math.min(Math.floor(ui.scrollTop / rowH), tableRows.length - inView) - BUFFER_ROWS);
    let last = Math.min(tableRows.length, first + inView + 2 * BUFFER_ROWS);
    if (!painted) last = Math.min(last, first + firstRows);
    const gap = (n) => (n > 0 ? `<tr class=gap style="height:${n * rowH}px"><td colspan=${COLS.length}></td></tr>` : "");
    const html = tableRows.slice(first, last).map(rowHtml).join(""), above = first, below = tableRows.length - last;
    if (html === drawn.html && !above === !drawn.above && !below === !drawn.below) {
      // the same rows (a big study's whole view after its first screen): only the gaps move
      if (above) body.firstElementChild.style.height = `${above * rowH}px`;
      if (below) body.lastElementChild.style.height = `${below * rowH}px`;
    } else body.innerHTML = gap(above) + html + gap(below);
    drawn = { html, above, below };
    const one = measured ? null : body.querySelector("tr.trial");
    if (one) {
      measured = true; // once, in the first frame: the gaps then match the rows exactly
      requestAnimationFrame(() => {
        const h = one.getBoundingClientRect().height, top = wrap.getBoundingClientRect().top;
        let again = h > 0 && Math.abs(h - rowH) > 0.5;
        if (again) rowH = h;
        const shown = Math.ceil((window.innerHeight - top) / rowH); // rows the window shows
        if (!painted && shown > firstRows) { firstRows = shown; again = true; }
        if (again) drawWindow();
      });
    }
  }

  // a trial's patch or outputs, asked when it is opened (a file has them inline)
  const part = (n, k, inline) => AIR.mode === "file" ? { [k]: (AIR.inline[inline] || {})[n] }
    : getJSON(`/api/studies/${encodeURIComponent(current.key)}/trials/${n}/${k}`).catch((e) => ({ error: e.message }));

  async function showTrial(n) {
    const t = current.trials.find((x) => x.n === n), box = document.getElementById("detail");
    if (!t) { box.innerHTML = ""; return; }
    let html = `<h2>Trial ${t.n} <span class="badge s-${esc(t.status)}">${esc(t.status)}</span></h2><div class=panel>
      <div><b>diff:</b> ${esc(t.diff_text)}</div>${t.rationale ? `<div><b>why:</b> ${esc(t.rationale)}</div>` : ""}
      ${t.failure ? `<div class=note><b>failure:</b> ${esc(t.failure)}</div>` : ""}
      <div class=muted>job ${esc(t.job_id || "")} · run ${esc(t.run_id || "")}${t.parent != null ? ` · parent trial ${t.parent}` : ""}</div>`;
    const o = t.job_id ? await part(n, "outputs", "outputs") : {};
    if (t.job_id) html += `<div id=outputs><b>outputs:</b> ${esc((o.outputs || []).join(" · ") || o.error || "none")}</div>`;
    if (t.code) {
      const p = await part(n, "patch", "patches");
      html += `<div><b>patch</b> (against ${t.parent != null ? "trial " + t.parent : "the base"}):</div><pre class=diff id=patch>${diffHtml(p.patch || "(no patch of its own)")}</pre>`;
    }
    box.innerHTML = html + "</div>";
  }

  function renderStudy(v) {
    const wrap = document.querySelector(".table-wrap");
    ui.scrollTop = wrap ? wrap.scrollTop : 0; // before any change: the layout is still clean
    if (!document.getElementById("cards")) skeleton(v);
    current = v;
    document.title = `${v.name} · ${v.state}`;
    document.getElementById("title").innerHTML = `${esc(v.name)} <span class="badge ${esc(v.state)}">${esc(v.state)}${v.stop_reason ? ": " + esc(v.stop_reason) : ""}</span>` +
      (AIR.canStop && v.state === "running" ? ` <button class=danger id=stop>stop study</button>` : "");
    const stop = document.getElementById("stop");
    if (stop) stop.onclick = stopStudy;
    const lo = v.lowest_seen, st = v.steering || { requests: [] }; // best.py's words; steer events
    const notes = [v.hardware_note, ...(v.warnings || []), lo && `lowest_seen ${num(lo.value)} (trial ${lo.trial}), not the best: ${lo.why_not_kept}`,
      ...st.requests, st.queued && `${st.queued} steered trial(s) queued to run next`, v.last_error && `[${v.last_error.code}] ${v.last_error.message}`].filter(Boolean);
    document.getElementById("notes").innerHTML = notes.map((x) => `<div class=note>${esc(x)}</div>`).join("");
    document.getElementById("chartbox").innerHTML = chart(v); // drawn once per journal change
    renderLive(v, false);
    renderTable(v);
    if (painted) renderLineage(v); // else once the first screen is on the screen
    window.AIR_RENDERED = { version: v.version, at_ms: performance.now() }; // for bench/study_page.py
    // for bench/study_page.py: the first draw (when the rows were painted: their elementtiming)
    if (!window.AIR_FIRST_DRAWN) window.AIR_FIRST_DRAWN = { at_ms: performance.now() };
  }

  // The parts that move while trials run (the "live" event): cards, budget, GPUs, running
  // trials, and the running rows' duration and cost. The chart is not drawn again.
  function renderLive(v, rows) {
    const c = v.cost, b = v.budget, best = v.best;
    if (rows) {
      const byN = new Map(v.running.map((r) => [r.n, r]));
      for (const t of current.trials) {
        const r = byN.get(t.n);
        if (r) { t.duration_s = r.duration_s; t.usd = r.usd; t.gpu_hours = r.gpu_hours; }
      }
    }
    const k = v.counts, done = k.succeeded + k.failed + k.pruned + k.cancelled;
    document.getElementById("cards").innerHTML = [
      ["trials done / budget", `${done} / ${b.trials.limit}`],
      [`best ${esc(v.objective.metric)} (${esc(v.objective.direction)})`, best ? `${num(best.value)} <span class=muted>trial ${best.trial}</span>` : "—"],
      ["noise floor", v.noise.floor != null ? num(v.noise.floor, 3) : "—"],
      ["cost so far", `${usd(c.usd)} <span class=muted>GPU ${usd(c.gpu_usd)} · LLM ${usd(c.llm_usd)}</span>`],
      ["per kept improvement", c.usd_per_improvement != null ? `${usd(c.usd_per_improvement)} <span class=muted>${c.kept_improvements} kept</span>` : "—"],
      ["trials/GPU-h · busy", c.gpu_busy != null ? `${num(c.trials_per_gpu_hour, 3)} · ${num(100 * c.gpu_busy, 2)}%` : "—"],
    ].map(([k, x]) => `<div class=card><div class=k>${k}</div><div class=v>${x}</div></div>`).join("");
    const lim = [["trials", b.trials.used, b.trials.limit, ""], ["wall time", b.wall_time_min.used, b.wall_time_min.limit, " min"],
      ["GPU-hours", b.gpu_hours.used, b.gpu_hours.limit, ""], ["LLM dollars", b.llm_usd.used, b.llm_usd.limit, ""]];
    document.getElementById("budget").innerHTML = lim.map(([k, u, l, unit]) => {
      const pct = l ? Math.min(100, (100 * u) / l) : 0;
      return `<div>${k}: ${num(u, 4)}${unit}${l ? ` / ${num(l, 4)}${unit}` : " <span class=muted>(no limit)</span>"}</div><div class="bar${l && u >= l ? " over" : ""}"><span style="width:${pct}%"></span></div>`;
    }).join("");
    document.getElementById("gpus").innerHTML = v.gpus.length ? v.gpus.map((g) => `<div>GPU ${g.index} ${esc(g.name)}: ${g.jobs.map(esc).join(", ")}</div>`).join("") : `<span class=muted>none</span>`;
    document.getElementById("running").innerHTML = v.running.length ? v.running.map((r) => `<div class=spark data-n=${r.n}><div>trial ${r.n} <span class=muted>${esc(r.diff_text)} · ${dur(r.duration_s)}</span></div>${spark(r.curve)}</div>`).join("") : `<span class=muted>none running</span>`;
    if (rows) drawWindow();
  }

  // The first screen is on the screen: what is below it (the table's rows out of the window,
  // the lineage, whose layout would cost the first paint a second pass; a big study's comes
  // with its whole view) is drawn from then on.
  let painted = false;
  function belowTheFold() {
    painted = true;
    if (!current || !current.trials) return;
    drawWindow();
    if (current.lineage) renderLineage(current); // a big study's: with its whole view
  }

  function renderLineage(v) {
    const box = document.getElementById("lineage");
    if (!v.lineage.length) { box.innerHTML = `<span class=muted>no code trials in this study</span>`; return; }
    const kids = {};
    for (const t of v.lineage) (kids[t.parent == null ? "base" : t.parent] ||= []).push(t);
    const known = new Set(v.lineage.map((t) => t.n));
    const node = (t) => `<li><a href="#" data-n=${t.n}>trial ${t.n}</a> <span class="badge s-${esc(t.status)}">${esc(t.status)}</span> ${num(t.value)} ${esc(t.decision || "")}${kids[t.n] ? `<ul class=tree>${kids[t.n].map(node).join("")}</ul>` : ""}</li>`;
    const roots = v.lineage.filter((t) => t.parent == null || !known.has(t.parent));
    box.innerHTML = `<ul class=tree><li>base code<ul class=tree>${roots.map(node).join("")}</ul></li></ul>` +
      (v.winning_patch ? `<div><b>winning patch</b> (trial ${v.best.trial}, from the base):</div><pre class=diff id=winning>${diffHtml(v.winning_patch)}</pre>` : "");
    box.querySelectorAll("a[data-n]").forEach((a) => a.addEventListener("click", (e) => { e.preventDefault(); ui.selected = +a.dataset.n; renderTable(current); showTrial(ui.selected); }));
  }

  async function stopStudy() {
    if (!confirm(`Stop study ${current.name} and cancel its running trials?`)) return;
    const r = await fetch(`/api/studies/${encodeURIComponent(current.key)}/stop`, { method: "POST", credentials: "same-origin" });
    if (!r.ok) alert(await r.text());
  }

  // --- live updates: server-sent events ("view": the journal changed, "live": running trials
  // moved); if the stream cannot be had, short polling, and the stream is tried again later.
  const live = (window.AIR_LIVE = { mode: null, events: 0, polls: 0 });
  let stream = null;

  function showView(v) {
    if (v.version === ui.version) return;
    const rest = ui.version === FIRST + v.version; // the whole view of the first screen shown
    ui.version = v.version;
    if (!rest) { renderStudy(v); return; }
    current = v; renderTable(v); // the rest of the table: the chart and all else are drawn
    if (painted) renderLineage(v); // else once the first screen is painted
    window.AIR_RENDERED = { version: v.version, at_ms: performance.now() };
  }
  const FIRST = "first-"; // a first screen's version (web/first.py)

  function listen(key) {
    const url = `/api/studies/${encodeURIComponent(key)}/events?version=${encodeURIComponent(ui.version || "")}`;
    stream = new EventSource(url, { withCredentials: true });
    live.mode = "sse";
    stream.addEventListener("view", (e) => { live.events++; showView(JSON.parse(e.data)); });
    stream.addEventListener("live", (e) => {
      live.events++;
      const p = JSON.parse(e.data);
      if (!current || ui.version === p.version) return;
      ui.version = p.version;
      Object.assign(current, p);
      renderLive(current, true);
      window.AIR_RENDERED = { version: p.version, at_ms: performance.now() };
    });
    let failures = 0; // in a row: the browser reconnects by itself, unless it was refused
    stream.onopen = () => { failures = 0; };
    stream.onerror = () => {
      if (stream.readyState !== EventSource.CLOSED && ++failures < 3) return;
      stream.close(); stream = null; poll(key, 0);
    };
  }

  async function poll(key, round) {
    live.mode = "poll"; live.polls++;
    try { showView(await getJSON(`/api/studies/${encodeURIComponent(key)}`)); }
    catch (e) { if (!current) app.innerHTML = `<p class=note>${esc(e.message)}</p>`; }
    if (round >= RETRY_STREAM_POLLS) listen(key); // try the stream again
    else setTimeout(() => poll(key, round + 1), POLL_MS);
  }
  const RETRY_STREAM_POLLS = 15;

  async function start() {
    const key = studyKey();
    if (AIR.mode === "file") {
      key ? renderStudy(AIR.inline.study) : renderList(AIR.inline.studies || []);
      afterPainted(belowTheFold);
      return;
    }
    if (!key) {
      try { renderList((await getJSON("/api/studies")).studies); }
      catch (e) { app.innerHTML = `<p class=note>${esc(e.message)}</p>`; }
      setTimeout(start, POLL_MS); // the list: short polling (it is small)
      return;
    }
    const block = document.getElementById("air-initial");
    const first = block ? JSON.parse(block.textContent) : null;
    if (block) block.remove();
    if (first && first.key === key) showView(first);
    const go = () => { if (!live.mode) window.EventSource ? listen(key) : poll(key, -Infinity); };
    if (!first) { painted = true; return go(); }
    afterPainted(() => { belowTheFold(); go(); });
  }

  // fn once the first screen is on the screen, not merely drawn: the first paint after it was
  // drawn (paint timing), or its first row's (Element Timing: where a paint before the draw
  // showed "loading…"), else the frame after it. A big study's whole view, which the stream then
  // brings (~600 KB to send, parse and lay out for 1,000 trials), and what is below the fold
  // do not compete with that paint for the CPU; a tab in the background, which paints
  // nothing, goes on within 1 s.
  function afterPainted(fn) {
    const drawn = performance.now(), types = (window.PerformanceObserver && PerformanceObserver.supportedEntryTypes) || [];
    let po = null, done = false;
    const once = () => {
      if (done) return;
      done = true;
      if (po) po.disconnect();
      setTimeout(fn, 0);
    };
    // a row is painted only once drawn; a paint's time is the frame's, coarsened (to ~4 ms)
    const seen = (list) => { if (list.getEntries().some((e) => e.entryType === "element" || e.startTime > drawn - 8)) once(); };
    const kinds = ["paint", "element"].filter((k) => types.includes(k));
    if (kinds.length) {
      po = new PerformanceObserver(seen);
      for (const type of kinds) po.observe({ type, buffered: true });
    } else requestAnimationFrame(once);
    setTimeout(once, 1000);
  }
  start();
})();