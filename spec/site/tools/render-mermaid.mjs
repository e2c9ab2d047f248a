// Renders one Mermaid diagram (standard input) to SVG (standard output) with beautiful-mermaid,
// which needs no browser. Called by conformance/spec_site.py when a diagram has no cached SVG.
import { renderMermaid } from 'beautiful-mermaid';
import { readFileSync } from 'node:fs';

const source = readFileSync(0, 'utf8');
process.stdout.write(await renderMermaid(source, { font: 'system-ui' }));
