'use strict';

// Echoes the event back with a marker, so tests can tell the real handler ran.
module.exports.echo = async (event) => ({ handler: 'node', event });

// Throws: Lambda reports an Unhandled function error.
module.exports.boom = async () => {
  throw new Error('boom from node');
};

// Runs past the function's 1 s timeout.
module.exports.slow = async () => {
  await new Promise((resolve) => setTimeout(resolve, 5000));
  return { handler: 'node', slow: true };
};
