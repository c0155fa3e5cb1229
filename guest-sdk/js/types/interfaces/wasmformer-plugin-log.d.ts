declare module 'wasmformer:plugin/log@0.3.3' {
  /**
   * Writes one message. The host caps the volume a plugin may log per event and says how
   * much it dropped.
   */
  export function log(level: Level, message: string): void;
  /**
   * Severity, mapped to the host's tracing levels.
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
