/**
 * This response's CSP nonce (index.html's <meta property="csp-nonce">): CodeMirror writes its
 * styles in <style> tags, which the policy allows only with it.
 */
export const styleNonce =
  document.querySelector<HTMLMetaElement>('meta[property="csp-nonce"]')?.nonce ?? "";
