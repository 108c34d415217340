// kitm search page: calls the JSON API of kitm.search.app and renders its answers. No framework, no build step;
// every text from the index or the user goes in through textContent, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let relevanceKind = null;

function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) node.append(child);
  return node;
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

async function call(url, options) {
  let response;
  try {
    response = await fetch(url, options);
  } catch (error) {
    throw new Error("The search server does not answer (" + error.message + ").");
  }
  let body = null;
  try { body = await response.json(); } catch (error) { /* not JSON: reported below */ }
  if (!response.ok) throw new Error((body && body.error) || ("The server answered " + response.status + "."));
  return body;
}

function formatRelevance(value) {
  if (value === null || value === undefined) return "—";
  return relevanceKind === "cider" ? value.toFixed(2) : value.toFixed(3);
}

function relevanceCell(value) {
  const cell = el("td", { class: "num relevance", "data-value": value === null ? "" : String(value) },
                  [formatRelevance(value)]);
  if (value !== null && value !== undefined) {
    const share = relevanceKind === "cider" ? Math.min(value / 10, 1) : Math.max(0, Math.min(value, 1));
    const bar = el("span", { class: "bar" }, [el("span")]);
    bar.firstChild.style.width = (100 * share).toFixed(0) + "%";
    cell.append(bar);
  }
  return cell;
}

function labelCell(annotated, relevance) {
  const cell = el("td", { class: "label" });
  if (annotated === true) cell.append(el("span", { class: "tag", text: "annotated pair" }));
  else if (relevanceKind === "truth" && relevance !== null && relevance >= 0.999)
    cell.append(el("span", { class: "tag missed", text: "fits fully, unlabelled" }));
  else cell.append(annotated === false ? "not labelled" : "—");
  return cell;
}

function thumb(result) {
  const image = el("img", { class: "thumb", src: result.thumbnail, alt: result.path, title: "Find this image's captions" });
  image.addEventListener("click", () => searchIndexedImage(result.image));
  return image;
}

function summary(results, key) {
  const known = results.filter((r) => r.relevance !== null && r.relevance !== undefined);
  if (!known.length) return null;
  const labelled = results.filter((r) => r.annotated === true).length;
  if (relevanceKind === "truth") {
    const full = known.filter((r) => r.relevance >= 0.999).length;
    return `${full} of these ${results.length} ${key} fit fully (relevance 1); binary labels count ${labelled} as right.`;
  }
  return `Binary labels count ${labelled} of these ${results.length} ${key} as right; the relevance column grades them all.`;
}

function renderNote(container, note, text) {
  if (text) container.append(el("p", { class: "summary", id: "summary", text }));
  if (note) container.append(el("p", { class: "note muted", text: note }));
}

function renderTextResults(answer) {
  relevanceKind = answer.relevance_source;
  const container = $("results");
  container.replaceChildren(el("h2", { text: `Images for “${answer.query}”` }));
  // Words the model never saw: its scores then look as sure as for a real caption, so the page says so first.
  if (answer.warning) container.append(el("p", { class: "warning", id: "query-warning", text: answer.warning }));
  renderNote(container, answer.relevance_note, summary(answer.results, "images"));
  // A folder of photos without captions has no relevance to show: no empty columns then.
  const graded = answer.results.some((r) => r.relevance !== null || r.annotated !== null);
  const titles = graded ? ["Rank", "Image", "Score", "Relevance", "Label", "Path"] : ["Rank", "Image", "Score", "Path"];
  const head = el("tr", {}, titles.map((t) => el("th", { text: t })));
  const rows = answer.results.map((r) => el("tr", { class: "result" }, [
    el("td", { class: "num rank", text: String(r.rank) }),
    el("td", {}, [thumb(r)]),
    el("td", { class: "num score", text: r.score.toFixed(3) }),
    ...(graded ? [relevanceCell(r.relevance), labelCell(r.annotated, r.relevance)] : []),
    el("td", { class: "path", text: r.path }),
  ]));
  container.append(el("table", { id: "image-results" }, [el("thead", {}, [head]), el("tbody", {}, rows)]));
}

function renderImageResults(answer, title) {
  relevanceKind = answer.relevance_source;
  const container = $("results");
  container.replaceChildren(el("h2", { text: title }));
  if (answer.query_image) {
    container.append(el("div", { class: "query-image" }, [
      el("img", { class: "thumb", src: answer.query_image.thumbnail, alt: answer.query_image.path }),
      el("span", { class: "path", text: answer.query_image.path }),
    ]));
  }
  if (answer.captions.length) {
    renderNote(container, answer.relevance_note, summary(answer.captions, "captions"));
    const head = el("tr", {}, ["Rank", "Caption", "Score", "Relevance", "Label"].map((t) => el("th", { text: t })));
    const rows = answer.captions.map((c) => el("tr", { class: "result" }, [
      el("td", { class: "num rank", text: String(c.rank) }),
      el("td", { class: "caption", text: c.text }),
      el("td", { class: "num score", text: c.score.toFixed(3) }),
      relevanceCell(c.relevance),
      labelCell(c.annotated, c.relevance),
    ]));
    container.append(el("table", { id: "caption-results" }, [el("thead", {}, [head]), el("tbody", {}, rows)]));
  } else {
    renderNote(container, answer.relevance_note, null);
  }
  container.append(el("h2", { text: "Nearest images" }));
  container.append(el("div", { class: "strip" }, answer.images.map((r) =>
    el("figure", {}, [thumb(r), el("figcaption", { text: `#${r.rank} · ${r.score.toFixed(3)}` })]))));
}

async function searchText(event) {
  if (event) event.preventDefault();
  showError("");
  const query = $("query").value;
  // The address names the search, so that it can be bookmarked, shared or reloaded (?q=...&k=...).
  history.replaceState(null, "", "?" + new URLSearchParams({ q: query, k: $("k").value }).toString());
  try {
    const answer = await call("/api/search/text", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ query, k: Number($("k").value) }),
    });
    renderTextResults(answer);
  } catch (error) {
    showError(error.message);
  }
}

async function searchIndexedImage(position) {
  showError("");
  try {
    const answer = await call(`/api/search/image/${position}?k=${$("k").value}`);
    renderImageResults(answer, "Captions for this image");
  } catch (error) {
    showError(error.message);
  }
}

async function searchFile(file) {
  showError("");
  if (!file) return;
  try {
    const answer = await call(`/api/search/image?k=${$("k").value}`, { method: "POST", body: file });
    renderImageResults(answer, `Captions for ${file.name}`);
  } catch (error) {
    showError(error.message);
  }
}

async function loadInfo() {
  try {
    const info = await call("/api/info");
    const parts = [`${info.num_images.toLocaleString()} images`];
    if (info.num_captions) parts.push(`${info.num_captions.toLocaleString()} captions`);
    const index = info.images_index;
    parts.push(index.kind === "exact" ? "exact search"
      : `approximate search (HNSW, recall@${index.recall_k} ${index.recall_at_k.toFixed(3)})`);
    parts.push(info.relevance === "truth" ? "graded relevance: the synthetic world's truth"
      : info.relevance === "cider" ? "graded relevance: CIDEr-D against the captions" : "no graded relevance");
    $("info").textContent = parts.join(" · ");
    if (!info.num_captions) $("drop").querySelector("span").textContent = "…or drop an image here to find similar images";
  } catch (error) {
    showError(error.message);
  }
}

$("text-form").addEventListener("submit", searchText);
$("file").addEventListener("change", (event) => searchFile(event.target.files[0]));
const drop = $("drop");
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  searchFile(event.dataTransfer.files[0]);
});
loadInfo();

// Opened on a query (/?q=a+red+circle&k=20): fill the form in and search.
const opened = new URLSearchParams(location.search);
if (opened.has("k") && [...$("k").options].some((option) => option.value === opened.get("k"))) $("k").value = opened.get("k");
if (opened.get("q")) {
  $("query").value = opened.get("q");
  searchText();
}
