// hello-node: greets the name in the body (tinyFaaS nodejs format).
module.exports = (req, res) => {
  const name = (req.body || "").trim() || "world";
  res.send(`Hello, ${name}!`);
};
