// weir's operator console. It reads the console's JSON API (api/cluster,
// api/topology; docs/console.md) every few seconds and draws the pages
// with DOM calls only: every text from the API goes in as text, never as
// markup.
'use strict';

(() => {
  const REFRESH_MS = 3000;
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const PAGES = ['topology', 'instances', 'lag', 'commits', 'state'];

  const state = { cluster: null, topology: null, selected: null, topologyAt: 0, error: '' };

  // ---- DOM helpers ----

  // el makes an HTML element: attrs sets attributes ("text" its text),
  // children are nodes or strings (as text).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function setAttrs(e, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = String(v);
      else if (k === 'onclick') e.addEventListener('click', v);
      else e.setAttribute(k, String(v));
    }
  }

  function append(e, children) {
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      e.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
    }
  }

  function table(headers, rows, attrs) {
    const head = el('tr', {}, headers.map((h) => {
      const [text, cls] = Array.isArray(h) ? h : [h, ''];
      return el('th', { class: cls || null, text });
    }));
    return el('table', attrs || {}, el('thead', {}, head), el('tbody', {}, rows));
  }

  function td(text, cls) { return el('td', { class: cls || null, text: text }); }
  function num(text) { return td(text, 'num'); }
  function badge(text, cls) { return el('span', { class: 'badge ' + (cls || text), text }); }

  // ---- formatting ----

  const nf = new Intl.NumberFormat('en');
  function fmtInt(n) { return n === undefined || n === null || n < 0 ? '—' : nf.format(Math.round(n)); }
  function fmtRate(n) {
    if (n === undefined || n === null || n < 0) return '—';
    return (n >= 100 ? nf.format(Math.round(n)) : n.toFixed(1)) + '/s';
  }
  function fmtPct(x) { return x === undefined || x === null || x < 0 ? '—' : Math.round(x * 100) + '%'; }
  function fmtBytes(n) {
    if (!n) return '0 B';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + units[i];
  }
  function fmtSecs(s) {
    if (s === undefined || s === null || s < 0) return '—';
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' m ' + Math.round(s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.round((s % 3600) / 60) + ' m';
    return (s / 86400).toFixed(1) + ' d';
  }
  function fmtAgo(ms) {
    if (!ms) return 'never';
    return fmtSecs(Math.max(0, (Date.now() - ms) / 1000)) + ' ago';
  }
  function fmtMs(x) { return x === undefined || x === null || x < 0 ? '—' : x.toFixed(x < 10 ? 1 : 0) + ' ms'; }
  function instanceName(m) { return m.addr || '(this instance, no address)'; }

  // ---- the cluster's figures ----

  function members() { return state.cluster ? state.cluster.members : []; }
  function live() { return members().filter((m) => m.status === 'ok' && m.instance); }

  function sum(list, f) { return list.reduce((a, x) => a + (f(x) || 0), 0); }

  function sumMaps(maps) {
    const out = {};
    for (const m of maps) for (const [k, v] of Object.entries(m || {})) out[k] = (out[k] || 0) + v;
    return out;
  }

  // subFigures returns, per sub-topology id, the largest busy and
  // backpressured shares of the threads running its tasks, and its input
  // records per second, over every instance that answered.
  function subFigures() {
    const out = {};
    for (const m of live()) {
      const inst = m.instance;
      const threads = new Map(inst.threads.map((t) => [t.thread, t]));
      for (const t of inst.tasks) {
        if (t.kind !== 'active') continue;
        const f = out[t.subtopology] || (out[t.subtopology] = { busy: -1, bp: -1, rate: 0, tasks: 0 });
        f.tasks++;
        const th = threads.get(t.thread);
        if (th) {
          f.busy = Math.max(f.busy, th.busy_share);
          f.bp = Math.max(f.bp, th.backpressured_share);
        }
      }
      for (const [sub, r] of Object.entries(inst.records.by_subtopology || {})) {
        const f = out[sub] || (out[sub] = { busy: -1, bp: -1, rate: 0, tasks: 0 });
        f.rate += r;
      }
    }
    return out;
  }

  // ---- refresh ----

  async function getJSON(path) {
    const r = await fetch(path, { headers: { Accept: 'application/json' }, cache: 'no-store' });
    if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
    return r.json();
  }

  async function refresh() {
    try {
      const stale = !state.topology || Date.now() - state.topologyAt > 30000 ||
        state.topology.subtopologies.some((s) => !s.partitions);
      if (stale) {
        state.topology = await getJSON('api/topology');
        state.topologyAt = Date.now();
      }
      state.cluster = await getJSON('api/cluster');
      state.error = '';
    } catch (e) {
      state.error = e && e.message ? e.message : String(e);
    }
    try {
      render();
    } catch (e) {
      state.error = 'drawing the page: ' + (e && e.message ? e.message : String(e));
      setStatus();
    }
    setTimeout(refresh, REFRESH_MS);
  }

  function setStatus() {
    const s = document.getElementById('status');
    if (state.error) {
      s.className = 'status error';
      s.textContent = 'not refreshed: ' + state.error;
      return;
    }
    const c = state.cluster;
    s.className = 'status';
    s.textContent = c ? `${members().length} instance(s) · generation ${c.generation} · updated ${new Date(c.time).toLocaleTimeString()}` : '';
  }

  function currentPage() {
    const p = location.hash.replace('#', '');
    return PAGES.includes(p) ? p : 'topology';
  }

  function render() {
    const page = currentPage();
    for (const p of PAGES) {
      document.getElementById('page-' + p).classList.toggle('active', p === page);
    }
    for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === page);
    if (state.topology) document.getElementById('app').textContent = state.topology.application_id;
    setStatus();
    if (!state.cluster || !state.topology) return;
    ({ topology: renderTopology, instances: renderInstances, lag: renderLag, commits: renderCommits, state: renderState })[page]();
  }

  // ---- page 1: topology ----

  const NODE_W = 190, NODE_H = 46, STORE_H = 40, COL_GAP = 56, ROW_GAP = 16, PAD = 24, SUB_GAP = 44;

  // layout places every node and store: per sub-topology, nodes in
  // columns by depth from its sources, stores under the column of their
  // first user; sub-topologies one under the other.
  function layout(top) {
    const pos = new Map(); // key -> {x, y, w, h}
    const boxes = [];
    let y = PAD;
    let width = 0;
    for (const sub of top.subtopologies) {
      const byName = new Map(sub.nodes.map((n) => [n.name, n]));
      const depth = new Map();
      for (const n of sub.nodes) if (n.kind === 'source') depth.set(n.name, 0);
      // Longest path from a source; the graph is acyclic, so |nodes| rounds suffice.
      for (let round = 0; round < sub.nodes.length; round++) {
        for (const n of sub.nodes) {
          if (!depth.has(n.name)) continue;
          for (const c of n.children || []) {
            if (byName.has(c) && (depth.get(c) ?? -1) < depth.get(n.name) + 1) depth.set(c, depth.get(n.name) + 1);
          }
        }
      }
      const cols = [];
      for (const n of sub.nodes) {
        const d = depth.get(n.name) ?? 0;
        (cols[d] = cols[d] || []).push('node:' + n.name);
      }
      for (const st of top.stores.filter((s) => s.subtopology === sub.id)) {
        const first = (st.users || []).find((u) => byName.has(u));
        const d = first !== undefined ? depth.get(first) ?? 0 : 0;
        (cols[d] = cols[d] || []).push('store:' + st.name);
      }
      const top0 = y + 28;
      let bottom = top0;
      cols.forEach((col, d) => {
        let cy = top0;
        for (const key of col || []) {
          const h = key.startsWith('store:') ? STORE_H : NODE_H;
          pos.set(key, { x: PAD + 16 + d * (NODE_W + COL_GAP), y: cy, w: NODE_W, h });
          cy += h + ROW_GAP;
        }
        bottom = Math.max(bottom, cy);
      });
      const w = 32 + Math.max(1, cols.length) * (NODE_W + COL_GAP) - COL_GAP;
      boxes.push({ sub, x: PAD, y, w, h: bottom - y + 4 });
      width = Math.max(width, PAD + w);
      y = bottom + 4 + SUB_GAP;
    }
    const globals = top.stores.filter((s) => s.subtopology < 0);
    globals.forEach((st, i) => pos.set('store:' + st.name, { x: PAD + 16 + i * (NODE_W + COL_GAP), y, w: NODE_W, h: STORE_H }));
    if (globals.length) y += STORE_H + PAD;
    return { pos, boxes, width: width + PAD, height: y };
  }

  function heat(share) {
    if (share === undefined || share < 0) return '#eef0f4';
    return `hsl(${Math.round(130 * (1 - Math.min(share, 1)))}, 62%, 86%)`;
  }

  function edgePath(a, b) {
    const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
    const dx = Math.max(30, (x2 - x1) / 2);
    return `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
  }

  function renderTopology() {
    const top = state.topology;
    const figs = subFigures();
    const written = sumMaps(live().map((m) => m.instance.records.written_per_second));
    const { pos, boxes, width, height } = layout(top);
    const root = svg('svg', { width, height, viewBox: `0 0 ${width} ${height}`, id: 'topology-svg', role: 'img', 'aria-label': 'topology graph' });
    root.appendChild(svg('defs', {}, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow' }))));
    for (const b of boxes) {
      const f = figs[b.sub.id];
      const tasks = b.sub.partitions ? `${b.sub.partitions} tasks` : 'tasks not known yet';
      root.appendChild(svg('rect', { class: 'sub-box', x: b.x, y: b.y, width: b.w, height: b.h, rx: 8 }));
      // At the box's right: a repartition edge comes in from above on the left.
      root.appendChild(svg('text', { class: 'sub-label', x: b.x + b.w - 12, y: b.y + 18, 'text-anchor': 'end', text: `Sub-topology ${b.sub.id} · ${tasks}` + (f ? ` · ${fmtRate(f.rate)} in` : '') }));
    }
    const edges = svg('g', { class: 'edges' });
    const nodes = svg('g', { class: 'nodes' });
    root.append(edges, nodes);
    const sinks = [];
    for (const sub of top.subtopologies) {
      const f = figs[sub.id] || { busy: -1, bp: -1, rate: 0 };
      for (const n of sub.nodes) {
        const p = pos.get('node:' + n.name);
        for (const c of n.children || []) {
          const q = pos.get('node:' + c);
          if (q) edges.appendChild(svg('path', { class: 'edge', d: edgePath(p, q), 'marker-end': 'url(#arrow)', 'data-from': n.name, 'data-to': c }));
        }
        for (const s of n.stores || []) {
          const q = pos.get('store:' + s);
          if (q) {
            edges.appendChild(svg('path', { class: 'edge store-edge', d: `M${p.x + p.w / 2},${p.y + p.h} L${q.x + q.w / 2},${q.y}`, 'data-from': n.name, 'data-to': 'store:' + s }));
          }
        }
        if (n.kind === 'sink' && n.internal) sinks.push(n);
        let line2 = '', fill = '#e6ecfa';
        if (n.kind === 'source') line2 = `${n.topic} · ${fmtRate(f.rate)}`;
        else if (n.kind === 'sink') line2 = `→ ${n.dynamic ? '(topic per record)' : n.topic} · ${fmtRate(written[n.topic] || 0)}`;
        else {
          line2 = `${fmtRate(f.rate)} · busy ${fmtPct(f.busy)}`;
          fill = heat(f.busy);
        }
        const bp = n.kind === 'processor' && f.bp >= 0.05;
        const g = svg('g', {
          class: 'node ' + n.kind + (bp ? ' backpressured' : '') + (state.selected === 'node:' + n.name ? ' selected' : ''),
          'data-node': n.name, 'data-kind': n.kind, 'data-sub': sub.id, tabindex: 0,
          transform: `translate(${p.x},${p.y})`, onclick: () => select('node:' + n.name),
        },
        svg('title', { text: `${n.kind} ${n.name}` }),
        svg('rect', { width: p.w, height: p.h, rx: n.kind === 'processor' ? 6 : 16, fill }),
        svg('text', { class: 'name', x: 10, y: 18, text: clip(n.name, 26) }),
        svg('text', { class: 'sub', x: 10, y: 35, text: clip(line2, 30) }));
        nodes.appendChild(g);
      }
    }
    for (const sink of sinks) {
      for (const sub of top.subtopologies) {
        for (const n of sub.nodes) {
          if (n.kind !== 'source' || !n.internal || n.topic !== sink.topic) continue;
          const a = pos.get('node:' + sink.name), b = pos.get('node:' + n.name);
          const x1 = a.x + a.w / 2, y1 = a.y + a.h, x2 = b.x + b.w / 2, y2 = b.y;
          edges.appendChild(svg('path', {
            class: 'edge repartition', d: `M${x1},${y1} C${x1},${y1 + 60} ${x2},${y2 - 60} ${x2},${y2}`,
            'marker-end': 'url(#arrow)', 'data-from': sink.name, 'data-to': n.name, 'data-topic': n.topic,
          }));
          edges.appendChild(svg('text', { class: 'edge-label', x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 10, 'text-anchor': 'middle', text: clip(n.topic, 60) }));
        }
      }
    }
    for (const st of top.stores) {
      const p = pos.get('store:' + st.name);
      if (!p) continue;
      const bytes = sum(live(), (m) => (m.instance.stores.find((s) => s.name === st.name) || {}).bytes);
      nodes.appendChild(svg('g', {
        class: 'node store' + (state.selected === 'store:' + st.name ? ' selected' : ''),
        'data-node': 'store:' + st.name, 'data-kind': 'store', tabindex: 0,
        transform: `translate(${p.x},${p.y})`, onclick: () => select('store:' + st.name),
      },
      svg('title', { text: `${st.type} store ${st.name}` }),
      svg('path', { class: 'shape', d: `M0,6 Q${p.w / 2},-4 ${p.w},6 L${p.w},${p.h - 4} Q${p.w / 2},${p.h + 4} 0,${p.h - 4} Z`, fill: '#f4efe1' }),
      svg('text', { class: 'name', x: 10, y: 19, text: clip('▤ ' + st.name, 26) }),
      svg('text', { class: 'sub', x: 10, y: 33, text: clip(`${st.type} · ${fmtBytes(bytes)}`, 30) })));
    }
    const graph = document.getElementById('graph');
    graph.replaceChildren(root, el('div', { class: 'legend' },
      el('span', {}, el('i', { class: 'cool' }), 'idle thread'), el('span', {}, el('i', { class: 'hot' }), 'busy thread'),
      el('span', {}, el('i', { class: 'bp' }), 'backpressured (≥ 5% of the time)'),
      el('span', { text: 'Busy and backpressured shares are of the threads running the sub-topology’s tasks (weir measures time per thread); rates are per sub-topology, per sink topic.' })));
    renderDetails();
  }

  function clip(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + '…' : s; }

  function select(key) {
    state.selected = key;
    renderTopology();
  }

  function renderDetails() {
    const box = document.getElementById('details');
    const key = state.selected;
    if (!key) {
      box.replaceChildren(el('p', { class: 'hint', text: 'Click a node for its figures.' }));
      return;
    }
    const top = state.topology;
    const rows = [];
    const kv = (k, v) => rows.push(el('dt', { text: k }), el('dd', { text: v }));
    let title = key;
    if (key.startsWith('store:')) {
      const name = key.slice(6);
      const st = top.stores.find((s) => s.name === name);
      if (!st) { state.selected = null; renderDetails(); return; }
      title = `store ${name}`;
      kv('type', st.type);
      kv('changelog', st.changelog);
      kv('partitions', st.partitions || '—');
      kv('used by', (st.users || []).join(', ') || '—');
      for (const m of live()) {
        const s = m.instance.stores.find((x) => x.name === name);
        if (!s) continue;
        kv(instanceName(m), `${fmtBytes(s.bytes)} · ${s.partitions.map((p) => p.partition + ' ' + p.role).join(', ') || 'no partition'}`);
      }
    } else {
      const name = key.slice(5);
      let node, sub;
      for (const s of top.subtopologies) for (const n of s.nodes) if (n.name === name) { node = n; sub = s; }
      if (!node) { state.selected = null; renderDetails(); return; }
      const f = subFigures()[sub.id] || { busy: -1, bp: -1, rate: 0, tasks: 0 };
      const failures = sumMaps(live().map((m) => m.instance.failures.by_node));
      title = `${node.kind} ${name}`;
      kv('sub-topology', `${sub.id} (${sub.partitions || '?'} tasks, ${f.tasks} running)`);
      if (node.topic) kv(node.kind === 'source' ? 'reads' : 'writes', node.topic);
      if (node.internal) kv('repartition', 'yes');
      if (node.stores && node.stores.length) kv('stores', node.stores.join(', '));
      if (node.children && node.children.length) kv('children', node.children.join(', '));
      if (node.kind === 'sink') {
        kv('records written', fmtRate(sumMaps(live().map((m) => m.instance.records.written_per_second))[node.topic] || 0));
      } else {
        kv('sub-topology input', fmtRate(f.rate));
      }
      kv('busiest thread', fmtPct(f.busy) + ' busy');
      kv('backpressured', `${fmtPct(f.bp)} of the time, summed over its partitions`);
      kv('failures at node', fmtInt(failures[name] || 0));
    }
    box.replaceChildren(el('h3', { text: title }), el('dl', { class: 'kv', id: 'details-list', 'data-selected': key }, rows),
      el('p', { class: 'hint', text: 'Thread figures are per thread: weir does not time single processors.' }));
  }

  // ---- page 2: instances and tasks ----

  function renderInstances() {
    const page = document.getElementById('page-instances');
    const ms = members();
    const lastRebalance = Math.max(0, ...live().map((m) => m.instance.rebalance.at || 0));
    const cards = ms.map((m) => {
      const inst = m.instance;
      const rows = [];
      const kv = (k, v) => rows.push(el('dt', { text: k }), el('dd', {}, v));
      kv('status', badge(m.status));
      if (m.error) kv('why', m.error);
      if (inst) {
        kv('state', badge(inst.state));
        kv('process id', el('span', { class: 'mono', text: inst.process_id || '—' }));
        kv('weir', `${inst.version} · ${inst.guarantee}`);
        kv('last rebalance', `generation ${inst.rebalance.generation}, ${fmtAgo(inst.rebalance.at)}`);
      } else {
        kv('host map', `${m.active.length} active, ${m.standby.length} standby tasks`);
      }
      const threads = inst ? table(['thread', ['busy', 'num'], ['backpressured', 'num'], ['tasks', 'num']],
        inst.threads.map((t) => el('tr', {}, td(t.thread), num(fmtPct(t.busy_share)), num(fmtPct(t.backpressured_share)), num(t.tasks)))) : null;
      return el('div', { class: 'card', 'data-instance': m.addr, 'data-status': m.status },
        el('h3', { text: instanceName(m) + (m.self ? ' (this one)' : '') }), el('dl', { class: 'kv' }, rows), threads);
    });
    const rows = [];
    for (const m of ms) {
      if (m.instance) {
        for (const t of m.instance.tasks) rows.push(taskRow(m, t));
      } else {
        for (const id of m.active) rows.push(taskRow(m, { id, kind: 'active', state: 'unknown', thread: -1 }));
      }
    }
    page.replaceChildren(
      el('div', { class: 'summary' },
        el('div', {}, el('b', { text: ms.length }), el('span', { text: 'instances advertising an address' })),
        el('div', {}, el('b', { text: live().length }), el('span', { text: 'answering' })),
        el('div', {}, el('b', { text: rows.filter((r) => r.dataset.kind === 'active').length }), el('span', { text: 'active tasks' })),
        el('div', {}, el('b', { text: state.cluster.generation }), el('span', { text: 'group generation' })),
        el('div', {}, el('b', { text: fmtAgo(lastRebalance) }), el('span', { text: 'last rebalance' }))),
      el('h2', { text: 'Instances' }), el('div', { class: 'cards', id: 'instances' }, cards),
      el('h2', { text: 'Tasks' }),
      table(['task', 'instance', ['thread', 'num'], 'kind', 'state', 'restore', ['records', 'num'], ['rate', 'num'], 'stream time'], rows, { id: 'tasks' }));
  }

  function taskRow(m, t) {
    let restore = '';
    if (t.restores && t.restores.length) {
      const rem = sum(t.restores, (r) => r.remaining), total = sum(t.restores, (r) => r.total);
      const progress = total ? 1 - rem / total : 0;
      const eta = Math.max(...t.restores.map((r) => r.eta_seconds));
      restore = el('span', {}, el('span', { class: 'bar' }, el('span', { class: 'fill', 'data-progress': progress.toFixed(3) })),
        `${fmtPct(progress)} · ${fmtInt(rem)} left · ETA ${fmtSecs(eta)}`);
    } else if (t.standby_lag) {
      restore = 'lag ' + Object.entries(t.standby_lag).map(([s, l]) => `${s} ${fmtInt(l)}`).join(', ');
    }
    const row = el('tr', { 'data-task': t.id, 'data-instance': m.addr, 'data-kind': t.kind, 'data-state': t.state },
      td(t.id, 'mono'), td(instanceName(m)), num(t.thread >= 0 ? t.thread : '—'), td(t.kind), el('td', {}, badge(t.state)),
      el('td', {}, restore), num(fmtInt(t.processed)), num(t.kind === 'active' && t.state !== 'unknown' ? fmtRate(t.records_per_second) : '—'),
      td(t.stream_time ? new Date(t.stream_time).toLocaleTimeString() : '—'));
    // A bar's width is set through the CSSOM: the page's policy allows
    // no inline style attribute.
    for (const f of row.querySelectorAll('.fill')) f.style.width = (Number(f.dataset.progress) * 100).toFixed(1) + '%';
    return row;
  }

  // ---- page 3: lag ----

  function sparkline(points, w, h) {
    const s = svg('svg', { class: 'spark', width: w, height: h, viewBox: `0 0 ${w} ${h}` });
    s.appendChild(svg('line', { x1: 0, y1: h - 1, x2: w, y2: h - 1 }));
    if (points.length < 2) return s;
    const t0 = points[0][0], t1 = points[points.length - 1][0];
    const top = Math.max(1, ...points.map((p) => p[1]));
    const xy = points.map((p) => `${((p[0] - t0) / Math.max(1, t1 - t0) * (w - 2) + 1).toFixed(1)},${(h - 2 - p[1] / top * (h - 4)).toFixed(1)}`);
    s.appendChild(svg('polyline', { points: xy.join(' ') }));
    return s;
  }

  const riskRank = { high: 0, rising: 1, ok: 2 };

  function renderLag() {
    const page = document.getElementById('page-lag');
    const parts = [];
    for (const m of live()) for (const p of m.instance.partitions) parts.push({ m, p });
    parts.sort((a, b) => (riskRank[a.p.risk] - riskRank[b.p.risk]) ||
      ((a.p.headroom_seconds ?? Infinity) - (b.p.headroom_seconds ?? Infinity)) || (b.p.lag - a.p.lag) ||
      a.p.topic.localeCompare(b.p.topic) || (a.p.partition - b.p.partition));
    const total = sum(parts, (x) => Math.max(0, x.p.lag));
    const inst = live()[0] ? live()[0].instance : null;
    const rows = parts.map(({ m, p }) => el('tr', { 'data-topic': p.topic, 'data-partition': p.partition, 'data-lag': p.lag, 'data-risk': p.risk },
      td(p.topic, 'mono'), num(p.partition), td(p.task || '—', 'mono'), td(instanceName(m)), num(fmtInt(p.lag)), num(fmtInt(p.committed_lag)),
      num(fmtSecs(p.oldest_unread_age_seconds)), num(p.headroom_seconds === undefined ? '∞' : fmtSecs(p.headroom_seconds)),
      el('td', {}, badge(p.risk)), el('td', {}, sparkline(p.history, 140, 28))));
    page.replaceChildren(
      el('div', { class: 'summary' },
        el('div', {}, el('b', { id: 'total-lag', 'data-lag': total, text: fmtInt(total) }), el('span', { text: 'records behind, all partitions' })),
        el('div', {}, el('b', { text: parts.filter((x) => x.p.risk !== 'ok').length }), el('span', { text: 'partitions at risk' })),
        el('div', {}, el('b', { text: inst ? `${inst.history_samples} × ${fmtSecs(inst.sample_interval_seconds)}` : '—' }), el('span', { text: 'history kept (samples × interval)' }))),
      parts.length ? table(['topic', ['partition', 'num'], 'task', 'instance', ['lag', 'num'], ['committed lag', 'num'], ['oldest unread', 'num'], ['retention headroom', 'num'], 'risk', 'lag history'],
        rows, { id: 'lag' }) : el('p', { class: 'hint', text: 'No instance reports an input partition yet.' }),
      el('p', { class: 'hint', text: 'Risk: high when the oldest unread record is within a quarter of the topic’s retention of being deleted; rising when the lag grew over the last sample intervals.' }));
  }

  // ---- page 4: commits and failures ----

  function renderCommits() {
    const page = document.getElementById('page-commits');
    const ms = live();
    const rows = ms.map((m) => {
      const c = m.instance.commits;
      return el('tr', { 'data-instance': m.addr }, td(instanceName(m)), num(fmtRate(c.per_second)), num(fmtRate(c.aborts_per_second)),
        num(fmtMs(c.latency_mean_ms)), num(fmtMs(c.latency_p99_ms)), num(fmtInt(c.committed)), num(fmtInt(c.aborted)),
        td(fmtAgo(c.last_commit)), el('td', {}, sparkline(c.history.map((p) => [p[0], p[1]]), 140, 28)));
    });
    const aborts = sumMaps(ms.map((m) => m.instance.commits.aborts));
    const producer = sumMaps(ms.map((m) => m.instance.commits.producer_events));
    const skipped = sumMaps(ms.map((m) => m.instance.failures.skipped));
    const dropped = sumMaps(ms.map((m) => m.instance.failures.dropped));
    const byNode = sumMaps(ms.map((m) => m.instance.failures.by_node));
    const pairs = (obj) => Object.entries(obj).sort((a, b) => a[0].localeCompare(b[0])).map(([k, v]) => el('tr', {}, td(k), num(fmtInt(v))));
    const events = [];
    for (const m of ms) for (const e of m.instance.errors) events.push({ m, e });
    events.sort((a, b) => b.e.time - a.e.time);
    const coords = (a) => {
      const parts = [];
      if (a.topic) parts.push(`${a.topic}${a.partition !== undefined ? '/' + a.partition : ''}${a.offset !== undefined ? '@' + a.offset : ''}`);
      for (const k of ['task', 'thread', 'node', 'store']) if (a[k] !== undefined) parts.push(`${k} ${a[k]}`);
      return parts.join(' · ');
    };
    page.replaceChildren(
      el('h2', { text: 'Commits' }),
      table(['instance', ['commits', 'num'], ['aborts', 'num'], ['latency mean', 'num'], ['latency p99', 'num'], ['committed', 'num'], ['aborted', 'num'], 'last commit', 'commits/s history'], rows, { id: 'commits' }),
      el('div', { class: 'cards' },
        el('div', { class: 'card' }, el('h3', { text: 'Aborted transactions, by what came of them' }), table(['outcome', ['count', 'num']], pairs(aborts))),
        el('div', { class: 'card' }, el('h3', { text: 'Producer events' }), table(['reason', ['count', 'num']], pairs(producer))),
        el('div', { class: 'card' }, el('h3', { text: 'Records passed over by the error policies' }),
          table(['what', ['records', 'num']], [
            ...Object.entries(skipped).map(([k, v]) => el('tr', {}, td('skipped: ' + k), num(fmtInt(v)))),
            el('tr', {}, td('dead-lettered'), num(fmtInt(sum(ms, (m) => m.instance.failures.dead_lettered)))),
            ...Object.entries(dropped).map(([k, v]) => el('tr', {}, td('writes dropped: ' + k), num(fmtInt(v)))),
            el('tr', {}, td('late (window closed)'), num(fmtInt(sum(ms, (m) => m.instance.failures.late)))),
            el('tr', {}, td('lost to retention'), num(fmtInt(sum(ms, (m) => m.instance.failures.lost)))),
          ])),
        el('div', { class: 'card' }, el('h3', { text: 'Failures by node' }), table(['node', ['records', 'num']], pairs(byNode)))),
      el('h2', { text: 'Last warnings and errors' }),
      events.length ? table(['time', 'instance', 'level', 'message', 'coordinates', 'error'], events.map(({ m, e }) =>
        el('tr', { 'data-instance': m.addr }, td(new Date(e.time).toLocaleTimeString()), td(instanceName(m)), el('td', {}, badge(e.level)),
          td(e.message), td(coords(e.attrs || {}), 'mono'), td(e.error || '', 'mono'))), { id: 'errors' })
        : el('p', { class: 'hint', id: 'errors', text: 'No warning or error logged.' }));
  }

  // ---- page 5: state ----

  function renderState() {
    const page = document.getElementById('page-state');
    const rows = [];
    for (const st of state.topology.stores) {
      for (const m of live()) {
        const s = m.instance.stores.find((x) => x.name === st.name);
        if (!s) continue;
        for (const p of s.partitions) {
          rows.push(el('tr', { 'data-store': st.name, 'data-partition': p.partition, 'data-instance': m.addr },
            td(st.name), td(st.type), td(st.changelog, 'mono'), td(instanceName(m)), num(fmtBytes(s.bytes)), num(p.partition), el('td', {}, badge(p.role)),
            num(fmtInt(p.checkpoint)), num(fmtInt(p.changelog_end)), num(p.changelog_end >= 0 ? fmtInt(Math.max(0, p.changelog_end - p.checkpoint)) : '—'),
            num(fmtInt(p.restored)), num(fmtInt(p.remaining)), num(fmtInt(p.standby_lag))));
        }
      }
    }
    page.replaceChildren(
      el('h2', { text: 'Stores' }),
      rows.length ? table(['store', 'type', 'changelog', 'instance', ['local size', 'num'], ['partition', 'num'], 'role', ['checkpoint', 'num'], ['changelog end', 'num'], ['behind', 'num'], ['restored', 'num'], ['restore left', 'num'], ['standby lag', 'num']], rows, { id: 'stores' })
        : el('p', { class: 'hint', text: 'No instance holds a store partition yet.' }),
      el('p', { class: 'hint', text: 'Local size is Badger’s estimate of the store’s disk on that instance, all its partitions together. The changelog end is looked up every sample interval.' }));
  }

  window.addEventListener('hashchange', () => {
    try { render(); } catch (e) { state.error = String(e); setStatus(); }
  });
  refresh();
})();
